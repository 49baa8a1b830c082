package ctl

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"tablestore/frontend/auth"
	"tablestore/internal/buildinfo"
	"tablestore/internal/masterclient"
	"tablestore/internal/metricsbridge"
	pb "tablestore/proto/tablestorepb"
)

// ErrFileExists means `debug zip` was given a file that exists, without
// --force.
var ErrFileExists = errors.New("ctl: file exists")

// zipRoot is the directory every file of a debug zip is under, so that
// unpacking it does not litter the current directory.
const zipRoot = "debug/"

// maxFetchBytes bounds one collected HTTP answer: a goroutine dump of a
// busy server is a few MiB; a runaway one must not exhaust ctl's memory.
const maxFetchBytes = 64 << 20

// zipParallel is how many processes are asked at once.
const zipParallel = 8

// Manifest is debug/manifest.json: what the zip holds and every error met
// while collecting it.
type Manifest struct {
	Created    string `json:"created"`
	CtlVersion string `json:"ctl_version"`
	// Masters is ctl's --master.
	Masters               string  `json:"masters"`
	RequestTimeoutSeconds float64 `json:"request_timeout_seconds"`
	// Processes are those ctl tried to reach over HTTP.
	Processes []ZipProcess `json:"processes"`
	Files     []ZipFile    `json:"files"`
	Errors    []ZipError   `json:"errors"`
	// Redacted counts the secrets (account keys, signatures) replaced by
	// [REDACTED] in the files.
	Redacted int `json:"redacted"`
}

// ZipProcess is one process whose HTTP endpoints a debug zip asked.
type ZipProcess struct {
	// Dir is its directory in the zip (masters/m1, servers/ps1,
	// frontends/ID, http/10.0.0.5_9090).
	Dir string `json:"dir"`
	// Source is how ctl learned of it: "ListMembers at ADDR" (a master),
	// "partition map" (a partition server), "ListFrontends at ADDR" (a
	// front-end watching that master's map), "--http-addrs".
	Source      string `json:"source"`
	MetricsAddr string `json:"metrics_addr"`
	PprofAddr   string `json:"pprof_addr"`
	// Note says why something of it was not collected; "" when nothing
	// was left out.
	Note string `json:"note"`
}

// ZipFile is one file of a debug zip.
type ZipFile struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	Bytes  int    `json:"bytes"`
	// Status is the HTTP status of a collected answer (0 for the master's
	// view): /readyz answers 503 with its reasons when not ready.
	Status int `json:"status"`
}

// ZipError is one failure while collecting: the rest was collected.
type ZipError struct {
	Source string `json:"source"`
	Error  string `json:"error"`
}

// ZipResult is what `debug zip --json` prints: one object.
type ZipResult struct {
	File   string     `json:"file"`
	Files  int        `json:"files"`
	Errors []ZipError `json:"errors"`
}

// debug runs `debug zip FILE`.
func (r *runner) debug(ctx context.Context, o *opts, args []string) error {
	if args[0] != "zip" {
		return fmt.Errorf("%w: debug takes zip FILE, got %q", ErrUsage, strings.Join(args, " "))
	}
	if o.requestTimeout <= 0 {
		return fmt.Errorf("%w: --request-timeout must be positive", ErrUsage)
	}
	extra, err := parseHTTPAddrs(o.httpAddrs)
	if err != nil {
		return err
	}
	if args[1] == "-" {
		// To stdout, for a pod whose file system is read-only:
		// kubectl exec ... debug zip - > debug.zip. stdout holds the zip
		// alone; the manifest says what failed.
		_, err := r.writeZip(ctx, o, r.out, extra)
		return err
	}
	res, err := r.debugZip(ctx, o, args[1], extra)
	if err != nil {
		return err
	}
	if r.json != nil {
		return r.json.write(res)
	}
	fmt.Fprintf(r.out, "wrote %s: %d files, %d errors (%smanifest.json lists them)\n", res.File, res.Files, len(res.Errors), zipRoot)
	for _, e := range res.Errors {
		fmt.Fprintf(r.out, "  %s: %s\n", e.Source, e.Error)
	}
	return nil
}

// parseHTTPAddrs checks --http-addrs: host:port each.
func parseHTTPAddrs(s string) ([]string, error) {
	addrs := masterclient.ParseAddrs(s)
	for _, a := range addrs {
		if !metricsbridge.ListenerAddr(a) {
			return nil, fmt.Errorf("%w: --http-addrs: %q is not host:port", ErrUsage, a)
		}
	}
	return addrs, nil
}

// debugZip writes the zip to a temporary file beside path and renames it
// into place only when complete: an interrupted or failed run leaves no
// partial file. Only the master's partition map is required; every other
// failure is recorded in the manifest.
func (r *runner) debugZip(ctx context.Context, o *opts, path string, extra []string) (ZipResult, error) {
	if _, err := os.Lstat(path); err == nil && !o.force {
		return ZipResult{}, fmt.Errorf("%w: %s (--force overwrites it)", ErrFileExists, path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return ZipResult{}, fmt.Errorf("ctl: debug zip: cannot write %s: %w", path, err)
	}
	placed := false
	defer func() {
		tmp.Close()
		if !placed {
			os.Remove(tmp.Name())
		}
	}()
	man, err := r.writeZip(ctx, o, tmp, extra)
	if err != nil {
		return ZipResult{}, err
	}
	if err := tmp.Sync(); err != nil {
		return ZipResult{}, fmt.Errorf("ctl: debug zip: writing %s: %w", tmp.Name(), err)
	}
	if err := place(tmp.Name(), path, o.force); err != nil {
		return ZipResult{}, err
	}
	placed = true
	return ZipResult{File: path, Files: len(man.Files), Errors: man.Errors}, nil
}

// writeZip collects everything into a zip written to w and returns its
// manifest. Only a failure to read the partition map (before anything is
// written), an interruption or a write error fails it.
func (r *runner) writeZip(ctx context.Context, o *opts, w io.Writer, extra []string) (Manifest, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	pm, err := r.partitionMap(cctx, "debug zip")
	cancel()
	if err != nil {
		return Manifest{}, err
	}
	now := r.env.now()
	z := &zipper{zw: zip.NewWriter(w), red: newRedactor(pm), now: now, man: Manifest{
		Created: now.UTC().Format(time.RFC3339Nano), CtlVersion: buildinfo.Line(), Masters: r.cfg.Masters,
		RequestTimeoutSeconds: o.requestTimeout.Seconds(), Processes: []ZipProcess{}, Files: []ZipFile{}, Errors: []ZipError{},
	}}
	r.zipMasterView(ctx, z)
	fes := r.zipFrontends(ctx, z)
	targets := r.zipTargets(ctx, pm, fes, extra, r.cfg.Timeout, z)
	collectProcesses(ctx, targets, o.requestTimeout, z)
	if err := ctx.Err(); err != nil {
		return Manifest{}, fmt.Errorf("ctl: debug zip: interrupted: %w", err)
	}
	if err := z.finish(); err != nil {
		return Manifest{}, fmt.Errorf("ctl: debug zip: writing the zip: %w", err)
	}
	return z.man, nil
}

// place moves the finished temporary file to path. Without force a hard
// link refuses an existing path atomically (one created since the check
// at the start included); where links are not supported, a second check
// and a rename do.
func place(tmp, path string, force bool) error {
	if !force {
		err := os.Link(tmp, path)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s (--force overwrites it)", ErrFileExists, path)
		}
		if err == nil {
			return os.Remove(tmp)
		}
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%w: %s (--force overwrites it)", ErrFileExists, path)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("ctl: debug zip: %w", err)
	}
	return nil
}

// zipMasterView writes the master's view with the code paths of the
// commands that print it (ranges, servers, events, master list --json).
func (r *runner) zipMasterView(ctx context.Context, z *zipper) {
	views := []struct {
		name, source string
		run          func(sub *runner, ctx context.Context) error
	}{
		{"cluster/ranges.json", "ctl ranges --json", func(sub *runner, ctx context.Context) error { return sub.ranges(ctx, &opts{}, nil) }},
		{"cluster/servers.json", "ctl servers --json", func(sub *runner, ctx context.Context) error { return sub.servers(ctx, &opts{}, nil) }},
		{"cluster/events.json", "ctl events --json", func(sub *runner, ctx context.Context) error { return sub.events(ctx, &opts{}, nil) }},
		{"cluster/masters.json", "ctl master list --json", func(sub *runner, ctx context.Context) error {
			return sub.master(ctx, &opts{}, []string{"list"})
		}},
	}
	for _, v := range views {
		var buf bytes.Buffer
		sub := &runner{cfg: r.cfg, out: &buf, json: newJSONLines(&buf), mc: r.mc, env: r.env}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		err := v.run(sub, cctx)
		cancel()
		if err != nil {
			z.fail(v.source, err)
		}
		if err == nil || buf.Len() > 0 {
			z.add(v.name, v.source, buf.Bytes(), 0)
		}
	}
}

// zipFrontends asks every master which front-ends watch it (as `ctl
// frontends`) and writes what they said as cluster/frontends.json; a
// master that did not answer (or predates ListFrontends) is recorded.
func (r *runner) zipFrontends(ctx context.Context, z *zipper) []Frontend {
	answers := r.askFrontends(ctx, r.cfg.Timeout)
	for _, a := range answers {
		if a.err != nil {
			z.fail("ListFrontends at "+a.addr, masterError("debug zip", a.err))
		}
	}
	fes := mergeFrontends(answers)
	var buf bytes.Buffer
	js := newJSONLines(&buf)
	for _, f := range fes {
		if err := js.write(f); err != nil {
			z.fail("ctl frontends --json", err)
			return fes
		}
	}
	z.add("cluster/frontends.json", "ctl frontends --json", buf.Bytes(), 0)
	return fes
}

// zipTarget is one process to ask over HTTP.
type zipTarget struct {
	proc ZipProcess
	// peer is an address of the process ctl reached otherwise (its gRPC
	// address), to tell a loopback address of another machine.
	peer string
	// sameAs is the directory of an earlier target with the same metrics
	// address: this one is listed, not asked again.
	sameAs string
}

// zipTargets lists the processes to ask: every master given in --master
// (each says where it serves, in its ListMembers answer), every partition
// server of the map (as it registered), every front-end watching a master
// (fes, as it told its master), and the --http-addrs (each master asked
// within timeout, --timeout). A process listed twice (by the same metrics
// address) is asked once.
func (r *runner) zipTargets(ctx context.Context, pm *pb.PartitionMap, fes []Frontend, extra []string, timeout time.Duration, z *zipper) []zipTarget {
	var out []zipTarget
	addrs, conns := r.mc.Each()
	for i, addr := range addrs {
		source := "ListMembers at " + addr
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := pb.NewMasterServiceClient(conns[i]).ListMembers(cctx, &pb.ListMembersRequest{})
		cancel()
		if err != nil {
			z.fail(source, masterError("debug zip", err))
			continue
		}
		dir := "masters/" + safeName(resp.GetSelfId())
		if resp.GetSelfId() == "" {
			dir = "masters/" + safeName(addr)
		}
		out = append(out, zipTarget{peer: addr, proc: ZipProcess{Dir: dir, Source: source,
			MetricsAddr: resp.GetSelfMetricsAddr(), PprofAddr: resp.GetSelfPprofAddr()}})
	}
	for _, sv := range serversFromMap(pm) {
		out = append(out, zipTarget{peer: sv.GRPCAddr, proc: ZipProcess{Dir: "servers/" + safeName(sv.ServerID),
			Source: "partition map", MetricsAddr: sv.MetricsAddr, PprofAddr: sv.PprofAddr}})
	}
	for _, f := range fes {
		out = append(out, zipTarget{peer: frontendPeer(f), proc: ZipProcess{Dir: "frontends/" + safeName(f.ID),
			Source: "ListFrontends at " + f.MasterAddr, MetricsAddr: f.MetricsAddr, PprofAddr: f.PprofAddr}})
	}
	for _, a := range extra {
		out = append(out, zipTarget{peer: a, proc: ZipProcess{Dir: "http/" + safeName(a), Source: "--http-addrs", MetricsAddr: a}})
	}
	return dedupeTargets(out)
}

// frontendPeer is an address of the front-end others reach, to tell a
// loopback listener of another machine (loopbackElsewhere): where its
// watch came from, else its first HTTP listener. Pure.
func frontendPeer(f Frontend) string {
	if f.PeerAddr != "" {
		return f.PeerAddr
	}
	if len(f.HTTPAddrs) > 0 {
		return f.HTTPAddrs[0]
	}
	return ""
}

// dedupeTargets marks a target whose metrics address an earlier one has
// (every role of `tablestore dev`, which share one listener) to be asked
// once, and drops one that repeats an earlier one's directory as well (a
// master listed twice in --master). Pure.
func dedupeTargets(ts []zipTarget) []zipTarget {
	seen := map[string]string{} // metrics address -> directory
	dirs := map[string]bool{}
	var out []zipTarget
	for _, t := range ts {
		if a := t.proc.MetricsAddr; a != "" {
			if dir, ok := seen[a]; ok {
				if dir == t.proc.Dir || t.proc.Source == "--http-addrs" {
					continue
				}
				t.sameAs = dir
			} else {
				seen[a] = t.proc.Dir
			}
		}
		// Two processes of one name (a master id given twice with
		// different addresses) keep separate directories; a renamed one's
		// name is taken too (a process may be named like it).
		if dirs[t.proc.Dir] {
			base := t.proc.Dir
			for n := 2; dirs[t.proc.Dir]; n++ {
				t.proc.Dir = fmt.Sprintf("%s-%d", base, n)
			}
		}
		dirs[t.proc.Dir] = true
		out = append(out, t)
	}
	return out
}

// safeName makes s one path element of the zip: "." and ".." (any name of
// dots alone) would name the directory itself or its parent.
func safeName(s string) string {
	if strings.Trim(s, ".") == "" {
		return strings.Repeat("_", max(1, len(s)))
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		}
		return '_'
	}, s)
}

// loopbackElsewhere reports whether addr is a loopback address of a
// process whose peer address is not: from ctl's machine it would reach
// ctl's own machine, another process (pprof's advice is to keep it on
// loopback). Pure.
func loopbackElsewhere(addr, peer string) bool {
	return isLoopback(addr) && !isLoopback(peer)
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// endpoint is one page asked of a process.
type endpoint struct {
	file, path string
	pprof      bool
	// okStatus are the statuses that are answers, not failures.
	okStatus []int
}

var zipEndpoints = []endpoint{
	{file: "metrics.txt", path: "/metrics", okStatus: []int{http.StatusOK}},
	{file: "healthz.txt", path: "/healthz", okStatus: []int{http.StatusOK, http.StatusServiceUnavailable}},
	{file: "readyz.txt", path: "/readyz", okStatus: []int{http.StatusOK, http.StatusServiceUnavailable}},
	{file: "version.txt", path: "/version", okStatus: []int{http.StatusOK}},
	{file: "goroutines.txt", path: "/debug/pprof/goroutine?debug=2", pprof: true, okStatus: []int{http.StatusOK}},
}

// collectProcesses asks every target's endpoints, zipParallel processes at
// a time, each request bounded by timeout.
func collectProcesses(ctx context.Context, targets []zipTarget, timeout time.Duration, z *zipper) {
	// Redirects are not followed: a listener could send ctl to any URL
	// (another host, ctl's own loopback), and its page would go into the
	// bug report as the process's.
	client := &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	sem := make(chan struct{}, zipParallel)
	var wg sync.WaitGroup
	for _, t := range targets {
		p := t.proc
		var notes []string
		switch {
		case t.sameAs != "":
			notes = append(notes, "the process of "+t.sameAs+" (the same metrics address): asked once, there")
			p.MetricsAddr, p.PprofAddr = "", ""
		case p.MetricsAddr == "":
			notes = append(notes, "no metrics address known (started without --metrics-addr, or a version that does not register it): give it in --http-addrs")
		case loopbackElsewhere(p.MetricsAddr, t.peer):
			notes = append(notes, "metrics address "+p.MetricsAddr+" is loopback on another machine: not asked")
			p.MetricsAddr = ""
		}
		if p.MetricsAddr != "" && !metricsbridge.ListenerAddr(p.MetricsAddr) {
			notes = append(notes, fmt.Sprintf("metrics address %q is not host:port: not asked", p.MetricsAddr))
			p.MetricsAddr = ""
		}
		if p.PprofAddr != "" && !metricsbridge.ListenerAddr(p.PprofAddr) {
			notes = append(notes, fmt.Sprintf("no goroutine dump: --pprof-addr %q is not host:port", p.PprofAddr))
			p.PprofAddr = ""
		}
		switch {
		case t.sameAs != "":
		case p.PprofAddr == "" && p.Source != "--http-addrs":
			notes = append(notes, "no goroutine dump: the process serves no --pprof-addr")
		case p.PprofAddr != "" && loopbackElsewhere(p.PprofAddr, t.peer):
			notes = append(notes, "no goroutine dump: --pprof-addr "+p.PprofAddr+" is loopback on another machine (run ctl there, or port-forward it)")
			p.PprofAddr = ""
		}
		t.proc.Note = strings.Join(notes, "; ")
		z.process(t.proc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			unreachable := map[string]bool{}
			for _, ep := range zipEndpoints {
				addr := p.MetricsAddr
				if ep.pprof {
					addr = p.PprofAddr
				}
				// A listener that did not answer is not asked again: each
				// try could wait the whole --request-timeout.
				if addr == "" || unreachable[addr] {
					continue
				}
				path, query, _ := strings.Cut(ep.path, "?")
				u := url.URL{Scheme: "http", Host: addr, Path: path, RawQuery: query}
				if !fetchInto(ctx, client, u.String(), p.Dir+"/"+ep.file, ep.okStatus, z) {
					unreachable[addr] = true
				}
			}
		}()
	}
	wg.Wait()
}

// fetchInto GETs url and adds its answer to the zip as name; a failure, or
// a status not in ok, is recorded (an answer with a body is kept too).
// answered is false when no HTTP answer came (refused, timed out).
func fetchInto(ctx context.Context, client *http.Client, url, name string, ok []int, z *zipper) (answered bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		z.fail(url, err)
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		z.fail(url, err)
		return false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxFetchBytes+1))
	if len(body) > maxFetchBytes {
		body = append(body[:maxFetchBytes], "\n[truncated by ctl debug zip]\n"...)
		z.fail(url, fmt.Errorf("answer over %d bytes: truncated", maxFetchBytes))
	}
	if err != nil {
		z.fail(url, fmt.Errorf("reading the answer: %w", err))
	}
	if !slices.Contains(ok, resp.StatusCode) {
		z.fail(url, fmt.Errorf("HTTP %s", resp.Status))
		if len(body) == 0 {
			return true
		}
	}
	z.add(name, url, body, resp.StatusCode)
	return true
}

// zipper adds files to the zip from several goroutines and keeps the
// manifest.
type zipper struct {
	mu  sync.Mutex
	zw  *zip.Writer
	red *redactor
	now time.Time
	man Manifest
	err error // the first write error: the zip is then broken
}

func (z *zipper) add(name, source string, body []byte, status int) {
	z.mu.Lock()
	defer z.mu.Unlock()
	body = z.red.redact(body)
	z.write(name, body)
	z.man.Files = append(z.man.Files, ZipFile{Name: zipRoot + name, Source: z.red.redactString(source), Bytes: len(body), Status: status})
}

// write adds one file; the caller holds mu.
func (z *zipper) write(name string, body []byte) {
	if z.err != nil {
		return
	}
	w, err := z.zw.CreateHeader(&zip.FileHeader{Name: zipRoot + name, Method: zip.Deflate, Modified: z.now})
	if err == nil {
		_, err = w.Write(body)
	}
	z.err = err
}

func (z *zipper) fail(source string, err error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.man.Errors = append(z.man.Errors, ZipError{Source: z.red.redactString(source), Error: z.red.redactString(err.Error())})
}

func (z *zipper) process(p ZipProcess) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.man.Processes = append(z.man.Processes, p)
}

// finish writes the manifest, sorted, and closes the zip.
func (z *zipper) finish() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	m := z.man
	slices.SortFunc(m.Files, func(a, b ZipFile) int { return strings.Compare(a.Name, b.Name) })
	slices.SortStableFunc(m.Errors, func(a, b ZipError) int { return strings.Compare(a.Source, b.Source) })
	slices.SortFunc(m.Processes, func(a, b ZipProcess) int { return strings.Compare(a.Dir, b.Dir) })
	m.Redacted = z.red.count
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	z.write("manifest.json", append(b, '\n'))
	z.man = m
	if z.err != nil {
		return z.err
	}
	return z.zw.Close()
}

// redactor replaces secrets in what goes into the zip: the account keys
// the master hands the front-ends (in the partition map ctl reads),
// Azurite's well-known key, and anything spelled like a key or a
// signature (an --account-key flag, a connection string's AccountKey, a
// SAS sig). None of the collected pages is known to hold one; this keeps a
// future one (a flag dump, a logged URL) out of bug reports.
type redactor struct {
	secrets []string
	count   int
}

// secretRes match a secret's name (group 1) and its value (group 2): a
// key or a signature ends at a connection string's or a query's
// separator, an account list (name:key;name2:key) at white space.
var secretRes = []*regexp.Regexp{
	regexp.MustCompile(`(?i)(--account-key[= ]|accountkey=|[?&]sig=)([^\s;&"'<>]+)`),
	regexp.MustCompile(`(?i)(azurite_accounts=|--accounts[= ])([^\s"'<>]+)`),
}

const redacted = "[REDACTED]"

func newRedactor(pm *pb.PartitionMap) *redactor {
	r := &redactor{secrets: []string{auth.DevAccountKey}}
	for _, a := range pm.GetAccounts() {
		for _, k := range a.GetKeys() {
			if len(k) > 0 {
				r.secrets = append(r.secrets, base64.StdEncoding.EncodeToString(k), base64.URLEncoding.EncodeToString(k))
			}
		}
	}
	return r
}

func (r *redactor) redact(b []byte) []byte {
	for _, s := range r.secrets {
		if n := bytes.Count(b, []byte(s)); n > 0 {
			r.count += n
			b = bytes.ReplaceAll(b, []byte(s), []byte(redacted))
		}
	}
	for _, re := range secretRes {
		b = re.ReplaceAllFunc(b, func(m []byte) []byte {
			sub := re.FindSubmatch(m)
			if string(sub[2]) == redacted {
				return m
			}
			r.count++
			return append(append([]byte{}, sub[1]...), redacted...)
		})
	}
	return b
}

func (r *redactor) redactString(s string) string { return string(r.redact([]byte(s))) }
