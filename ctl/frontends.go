package ctl

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/masterclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// The front-ends are known to the masters through their partition map
// watches (master/frontends.go): each master lists the watches open on
// it. A watch is served by the leader, so the leader lists them all but
// during a leader change, when some may still be on the old one or not
// yet back: ctl asks every master of --master and merges the answers,
// one record per front-end (its newest watch).

// frontendAnswer is one master's ListFrontends answer, or why none came.
type frontendAnswer struct {
	addr string // as given in --master
	resp *pb.ListFrontendsResponse
	err  error
}

// askFrontends asks every master of --master at once, each call bounded
// by timeout.
func (r *runner) askFrontends(ctx context.Context, timeout time.Duration) []frontendAnswer {
	addrs, conns := r.mc.Each()
	out := make([]frontendAnswer, len(addrs))
	var wg sync.WaitGroup
	for i := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			resp, err := pb.NewMasterServiceClient(conns[i]).ListFrontends(cctx, &pb.ListFrontendsRequest{})
			out[i] = frontendAnswer{addr: addrs[i], resp: resp, err: err}
		}()
	}
	wg.Wait()
	return out
}

// mergeFrontends makes the answers one record per front-end id: of the
// watches listed for one id (by two masters during a leader change, or
// an old stream not yet ended), the newest, a leader's first on a tie.
// Sorted by id. Pure.
func mergeFrontends(answers []frontendAnswer) []Frontend {
	best := map[string]Frontend{}
	for _, a := range answers {
		if a.err != nil {
			continue
		}
		for _, w := range a.resp.GetFrontends() {
			f := frontendFromPB(w, a.addr, a.resp)
			old, ok := best[f.ID]
			if !ok || f.ConnectedUnixNano > old.ConnectedUnixNano ||
				(f.ConnectedUnixNano == old.ConnectedUnixNano && f.MasterLeader && !old.MasterLeader) {
				best[f.ID] = f
			}
		}
	}
	out := make([]Frontend, 0, len(best))
	for _, f := range best {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Frontend) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func frontendFromPB(w *pb.WatchingFrontend, addr string, resp *pb.ListFrontendsResponse) Frontend {
	info := w.GetFrontend()
	f := Frontend{ID: info.GetId(), HTTPAddrs: append([]string{}, info.GetHttpAddrs()...),
		MetricsAddr: info.GetMetricsAddr(), PprofAddr: info.GetPprofAddr(), Version: info.GetVersion(),
		StartedUnixNano: info.GetStartUnixNano(), ConnectedUnixNano: w.GetConnectedUnixNano(),
		Master: resp.GetSelfId(), MasterAddr: addr, MasterLeader: resp.GetLeader(), PeerAddr: w.GetPeerAddr(),
		MapVersionSent: w.GetMapVersionSent(), MasterMapVersion: resp.GetMapVersion(), LastSendUnixNano: w.GetLastSendUnixNano()}
	f.Started, f.Connected = rfc3339(f.StartedUnixNano), rfc3339(f.ConnectedUnixNano)
	if f.MasterMapVersion > f.MapVersionSent {
		f.MapVersionsBehind = f.MasterMapVersion - f.MapVersionSent
	}
	return f
}

// rfc3339 formats a Unix time in nanoseconds as the records do; "" for 0.
func rfc3339(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}

// frontends runs `frontends`: an error only when no master answered; the
// masters that did not are noted below the table (--json: left out).
func (r *runner) frontends(ctx context.Context, _ *opts, _ []string) error {
	answers := r.askFrontends(ctx, r.cfg.Timeout)
	var failed []string
	var first error
	unreachable := true
	for _, a := range answers {
		if a.err != nil {
			failed = append(failed, fmt.Sprintf("no answer from %s: %v", a.addr, masterError("frontends", a.err)))
			if first == nil {
				first = masterError("frontends", a.err)
			}
			if c := rpcerr.Parse(a.err).Code; c != codes.Unavailable && c != codes.DeadlineExceeded {
				unreachable = false
			}
		}
	}
	if len(failed) == len(answers) {
		if unreachable {
			// As when no leader answers the other commands: the same
			// exit status and record kind for scripts.
			return fmt.Errorf("ctl: frontends: no master answered at %s within %v: %w: %w (every master failed: %s)",
				r.cfg.Masters, r.cfg.Timeout, masterclient.ErrNoMaster, first, strings.Join(failed, "; "))
		}
		// The first master's failure is the one to act on (kind, code):
		// the others are listed.
		return fmt.Errorf("%w (every master failed: %s)", first, strings.Join(failed, "; "))
	}
	fs := mergeFrontends(answers)
	if r.json != nil {
		for _, f := range fs {
			if err := r.json.write(f); err != nil {
				return err
			}
		}
		return nil
	}
	if err := writeFrontendsTable(r.out, fs, r.env.now()); err != nil {
		return err
	}
	for _, f := range failed {
		if _, err := fmt.Fprintln(r.out, f); err != nil {
			return err
		}
	}
	return nil
}

func writeFrontendsTable(w io.Writer, fs []Frontend, now time.Time) error {
	t := newTable("FRONTEND", "HTTP ADDR", "METRICS ADDR", "VERSION", ">MAP SENT", "BEHIND", ">CONNECTED", "MASTER")
	for _, f := range fs {
		connected := "-"
		if f.ConnectedUnixNano != 0 {
			connected = max(0, now.Sub(time.Unix(0, f.ConnectedUnixNano))).Round(time.Second).String() + " ago"
		}
		master := orDash(f.Master)
		if f.MasterLeader {
			master += " (leader)"
		}
		t.add(f.ID, orDash(strings.Join(f.HTTPAddrs, ",")), orDash(f.MetricsAddr), orDash(f.Version),
			fmt.Sprint(f.MapVersionSent), fmt.Sprint(f.MapVersionsBehind), connected, master)
	}
	return t.write(w)
}
