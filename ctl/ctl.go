package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tablestore/internal/masterclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// Sentinel errors; wrapped with details.
var (
	// ErrUsage means the command line is wrong (unknown flag, missing or
	// malformed argument).
	ErrUsage = errors.New("ctl: usage")
	// ErrUnknownCommand means the command name is not one of ctl's.
	ErrUnknownCommand = errors.New("ctl: unknown command")
	// ErrTableNotFound means `ranges --table` named a table the map lacks.
	ErrTableNotFound = errors.New("ctl: table not found")
)

// command is one ctl subcommand.
type command struct {
	name    string
	args    string // synopsis of flags and positional arguments
	summary string
	// nargs is the number of positional arguments required; with varargs
	// the least number, the command checking the rest itself.
	nargs   int
	varargs bool
	// flags registers the command's own flags into opts.
	flags func(fs *flag.FlagSet, o *opts)
	run   func(r *runner, ctx context.Context, o *opts, args []string) error
	// streams is set for commands whose --timeout is not a deadline for
	// the whole run (events --follow).
	streams func(o *opts) bool
}

// opts collects every command's own flags; each command reads its own.
type opts struct {
	table  string
	follow bool
	since  uint64
	to     string
	from   string
	undo   bool
	wait   time.Duration
	// split
	inGroup bool
	// move, transfer-leader
	whole bool
	// debug zip
	force          bool
	httpAddrs      string
	requestTimeout time.Duration
}

var commands = []command{
	{name: "ranges", args: "[--table T]", summary: "ranges with generation, replicas, leader and load",
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.StringVar(&o.table, "table", "", "only the ranges of this table (case-insensitive)")
		},
		run: (*runner).ranges},
	{name: "servers", summary: "partition servers: addresses, liveness, replica and leader counts",
		run: (*runner).servers},
	{name: "events", args: "[--follow] [--since N]", summary: "the master's event log: splits, merges, moves, throttling, failures",
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.BoolVar(&o.follow, "follow", false, "keep printing new events until interrupted (Ctrl-C)")
			fs.Uint64Var(&o.since, "since", 0, "first event sequence number to print (0: the whole log the master keeps)")
		},
		run: (*runner).events, streams: func(o *opts) bool { return o.follow }},
	{name: "split", args: "TABLE PARTITIONKEY [--in-group]", nargs: 2, summary: "split the range holding PARTITIONKEY at that key",
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.BoolVar(&o.inGroup, "in-group", false, "keep the right-hand range in the range's Raft group: one log entry, the same leader, no new group (docs/range-groups.md)")
		},
		run: (*runner).split},
	{name: "merge", args: "RANGE_ID", nargs: 1, summary: "merge a range with its right neighbour",
		run: (*runner).merge},
	{name: "move", args: "RANGE_ID --to SERVER [--from SERVER] [--whole]", nargs: 1, summary: "move one replica of a range to another server",
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.StringVar(&o.to, "to", "", "server id to move the replica to (required)")
			fs.StringVar(&o.from, "from", "", "server id of the replica to move (empty: the master picks the busiest)")
			fs.BoolVar(&o.whole, "whole", false, wholeUsage)
		},
		run: (*runner).move},
	{name: "transfer-leader", args: "RANGE_ID --to SERVER [--whole]", nargs: 1, summary: "move a range's leadership to another of its replicas",
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.StringVar(&o.to, "to", "", "server id of the replica to lead (required)")
			fs.BoolVar(&o.whole, "whole", false, wholeUsage)
		},
		run: (*runner).transferLeader},
	{name: "drain", args: "SERVER [--wait D] [--undo]", nargs: 1,
		summary: "take a partition server out: move its replicas and leaderships away, place nothing new there",
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.DurationVar(&o.wait, "wait", 30*time.Minute, "follow the progress until the server is empty or this long (0: return at once)")
			fs.BoolVar(&o.undo, "undo", false, "clear the drain mark instead (the server takes new replicas again)")
		},
		run: (*runner).drain, streams: func(o *opts) bool { return o.wait > 0 && !o.undo }},
	{name: "remove-server", args: "SERVER", nargs: 1,
		summary: "forget a partition server that is down and holds no replica (after drain and scale-in)",
		run:     (*runner).removeServer},
	{name: "ungroup-tables", args: "[--wait D]",
		summary: "take every table's range out of the shared Raft groups (anchor groups) and delete the anchors: the downgrade from --table-groups",
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.DurationVar(&o.wait, "wait", 30*time.Minute, "call the master again until nothing is left or this long (0: one call)")
		},
		run: (*runner).ungroupTables, streams: func(*opts) bool { return true }},
	{name: "group-tables", args: "[--wait D]",
		summary: "take every table that is one range in a Raft group of its own, cold and small, into a shared Raft group (anchor group), its rows where they are",
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.DurationVar(&o.wait, "wait", 30*time.Minute, "call the master again until nothing remains or this long (0: one call)")
		},
		run: (*runner).groupTables, streams: func(*opts) bool { return true }},
	{name: "frontends", summary: "front-ends watching the masters' partition map: addresses, version, map version sent",
		run: (*runner).frontends},
	{name: "master", args: "list | add ID RAFT_ADDR | remove ID", nargs: 1, varargs: true,
		summary: "the master group's members; add a master started with --join, remove one",
		run:     (*runner).master},
	// --timeout bounds each master call rather than the whole run: a zip
	// of a large cluster asks every process.
	{name: "debug", args: "zip FILE [--force] [--http-addrs ADDRS] [--request-timeout D]", nargs: 2,
		summary: "write a zip for a bug report: the master's view, every process's metrics, health, version and goroutines",
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.BoolVar(&o.force, "force", false, "overwrite FILE if it exists")
			fs.StringVar(&o.httpAddrs, "http-addrs", "", "more metrics listeners (host:port, comma-separated) to ask: processes the masters do not know (front-ends of older versions, other tools)")
			fs.DurationVar(&o.requestTimeout, "request-timeout", 10*time.Second, "time limit of each HTTP request to a process")
		},
		run: (*runner).debug, streams: func(*opts) bool { return true }},
}

func findCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// Synopses maps every command's name to its synopsis (its flags and
// arguments, as `ctl help` prints them), for checks of the docs.
func Synopses() map[string]string {
	out := make(map[string]string, len(commands))
	for _, c := range commands {
		out[c.name] = c.args
	}
	return out
}

// FlagSet returns the flags a command line of command accepts, its own and
// the common ones, with their defaults; "" gives the common flags alone
// (those before the command name). ok is false for an unknown command.
func FlagSet(command string) (fs *flag.FlagSet, ok bool) {
	cfg := DefaultConfig()
	if command == "" {
		fs = flag.NewFlagSet("ctl", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		return fs, true
	}
	c, ok := findCommand(command)
	if !ok {
		return nil, false
	}
	return commandFlags(c, &cfg, &opts{}, io.Discard), true
}

// env is what the output depends on besides the master's answers; tests fix
// it.
type env struct {
	now func() time.Time
	loc *time.Location
}

// Run runs `tablestore ctl` with args (the words after "ctl"): tables or
// JSON lines on stdout, usage on stderr. Ctrl-C (SIGINT) or SIGTERM stops
// it; a followed event stream then ends without error.
func Run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return RunContext(ctx, args, stdout, stderr)
}

// RunContext is Run under a caller's context.
func RunContext(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return run(ctx, args, stdout, stderr, env{now: time.Now, loc: time.Local})
}

// run runs the command; with --json a failure is also written to stderr
// as one JSON object (ErrorRecord) and returned as a *ReportedError.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, e env) error {
	cfg := DefaultConfig()
	err := runCommand(ctx, &cfg, args, stdout, stderr, e)
	if err == nil || !cfg.JSON {
		return err
	}
	if werr := newJSONLines(stderr).write(errorRecord(err)); werr != nil {
		return err
	}
	return &ReportedError{err: err}
}

// runCommand parses args into cfg (which also says whether --json was
// given, even when the command line is wrong after it) and runs the
// command.
func runCommand(ctx context.Context, cfgp *Config, args []string, stdout, stderr io.Writer, e env) error {
	cfg := cfgp
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.RegisterFlags(fs)
	fs.Usage = func() { usage(stderr, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() == 0 {
		usage(stderr, fs)
		return fmt.Errorf("%w: no command given", ErrUsage)
	}
	name := fs.Arg(0)
	if name == "help" {
		c, ok := findCommand(fs.Arg(1))
		switch {
		case ok:
			commandFlags(c, cfg, &opts{}, stderr).Usage()
		case fs.NArg() > 1:
			usage(stderr, fs)
			return fmt.Errorf("%w %q", ErrUnknownCommand, fs.Arg(1))
		default:
			usage(stderr, fs)
		}
		return nil
	}
	c, ok := findCommand(name)
	if !ok {
		usage(stderr, fs)
		return fmt.Errorf("%w %q", ErrUnknownCommand, name)
	}
	var o opts
	sub := commandFlags(c, cfg, &o, stderr)
	pos, err := parseInterleaved(sub, fs.Args()[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %s: %v", ErrUsage, c.name, err)
	}
	if len(pos) != c.nargs && !(c.varargs && len(pos) >= c.nargs) {
		return fmt.Errorf("%w: %s takes %d argument(s), got %d: tablestore ctl %s %s", ErrUsage, c.name, c.nargs, len(pos), c.name, c.args)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	creds, err := cfg.TLS.Load()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	mc, err := masterclient.New(masterclient.ParseAddrs(cfg.Masters), creds.DialOption())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	defer mc.Close()
	r := &runner{cfg: *cfg, out: stdout, mc: mc, env: e}
	if cfg.JSON {
		r.json = newJSONLines(stdout)
	}
	if c.streams == nil || !c.streams(&o) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	return c.run(r, ctx, &o, pos)
}

// commandFlags builds a command's flag set: the common flags again (so they
// may follow the command name) and the command's own.
func commandFlags(c command, cfg *Config, o *opts, stderr io.Writer) *flag.FlagSet {
	sub := flag.NewFlagSet("ctl "+c.name, flag.ContinueOnError)
	sub.SetOutput(stderr)
	cfg.RegisterFlags(sub)
	if c.flags != nil {
		c.flags(sub, o)
	}
	sub.Usage = func() {
		fmt.Fprintf(stderr, "usage: tablestore ctl %s %s\n\n%s\n\nflags:\n", c.name, c.args, c.summary)
		sub.PrintDefaults()
	}
	return sub
}

// parseInterleaved parses flags anywhere among the positional arguments
// (`split orders p5 --json` as well as `split --json orders p5`), since the
// flag package stops at the first positional one. After "--" everything is
// positional, for a PartitionKey that starts with '-'.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: tablestore ctl [flags] <command> [command flags] [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-50s %s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	fmt.Fprintln(w, "\nflags (before or after the command; `tablestore ctl help <command>` for its own):")
	fs.PrintDefaults()
}

// runner carries what every command needs.
type runner struct {
	cfg  Config
	out  io.Writer
	json *jsonLines // nil: human tables
	mc   *masterclient.Client
	env  env
}

func (r *runner) partitionMap(ctx context.Context, op string) (*pb.PartitionMap, error) {
	var pm *pb.PartitionMap
	var last error
	err := r.mc.Call(ctx, func(ctx context.Context, c pb.MasterServiceClient) error {
		var err error
		pm, err = c.GetPartitionMap(ctx, &pb.GetPartitionMapRequest{})
		last = err
		return err
	})
	if errors.Is(err, masterclient.ErrNoMaster) && last != nil {
		// The last answer itself, for masterError to read.
		err = fmt.Errorf("%w: %w", masterclient.ErrNoMaster, last)
	}
	if err != nil {
		return nil, r.masterError(op, err)
	}
	return pm, nil
}

// masterError names the masters tried when none answered, the usual
// mistake being a wrong --master; when the last of them answered that it
// does not lead, the likely one is a --master that lists only followers
// (ctl finds the leader only among the addresses given).
func (r *runner) masterError(op string, err error) error {
	if errors.Is(err, masterclient.ErrNoMaster) {
		hint := ""
		if rpcerr.Parse(err).Reason == rpcerr.ReasonNotLeader {
			hint = " (the last master asked answered that it does not lead: does --master list every master? ctl looks for the leader only there)"
		}
		return fmt.Errorf("ctl: %s: no master leader answered at %s within %v%s: %w", op, r.cfg.Masters, r.cfg.Timeout, hint, err)
	}
	return masterError(op, err)
}

func (r *runner) ranges(ctx context.Context, o *opts, _ []string) error {
	pm, err := r.partitionMap(ctx, "ranges")
	if err != nil {
		return err
	}
	if o.table != "" && !hasTable(pm, o.table) {
		return fmt.Errorf("%w: %q", ErrTableNotFound, o.table)
	}
	rs := rangesFromMap(pm, o.table)
	if r.json != nil {
		for _, x := range rs {
			if err := r.json.write(x); err != nil {
				return err
			}
		}
		return nil
	}
	return writeRangesTable(r.out, rs)
}

func hasTable(pm *pb.PartitionMap, name string) bool {
	for _, t := range pm.GetTables() {
		if strings.EqualFold(t.GetName(), name) {
			return true
		}
	}
	return false
}

func (r *runner) servers(ctx context.Context, _ *opts, _ []string) error {
	pm, err := r.partitionMap(ctx, "servers")
	if err != nil {
		return err
	}
	ss := serversFromMap(pm)
	if r.json != nil {
		for _, x := range ss {
			if err := r.json.write(x); err != nil {
				return err
			}
		}
		return nil
	}
	return writeServersTable(r.out, ss, r.env.now())
}

func (r *runner) events(ctx context.Context, o *opts, _ []string) error {
	if r.json == nil {
		if err := writeEventHeader(r.out); err != nil {
			return err
		}
	}
	err := streamEvents(ctx, r.mc, o.since, o.follow, r.cfg.Timeout, func(e *pb.Event) error {
		ev := eventFromPB(e)
		if r.json != nil {
			return r.json.write(ev)
		}
		return writeEventRow(r.out, ev, r.env.loc)
	})
	if err != nil {
		return r.masterError("events", err)
	}
	return nil
}

func parseRangeID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("%w: RANGE_ID must be a positive number, got %q", ErrUsage, s)
	}
	return id, nil
}

// result prints an operation's outcome: a sentence and the ranges it
// returned, or one Result object.
func (r *runner) result(res Result, sentence string) error {
	if r.json != nil {
		return r.json.write(res)
	}
	if _, err := fmt.Fprintln(r.out, sentence); err != nil {
		return err
	}
	if len(res.Ranges) == 0 {
		return nil
	}
	return writeDescriptorsTable(r.out, res.Ranges)
}

func descriptors(ds ...*pb.RangeDescriptor) []Range {
	out := []Range{}
	for _, d := range ds {
		if d != nil {
			out = append(out, rangeFromPB(d, nil))
		}
	}
	return out
}

func (r *runner) split(ctx context.Context, o *opts, args []string) error {
	table, key := args[0], args[1]
	if table == "" || key == "" {
		// Splitting at "" would split at the start of the table.
		return fmt.Errorf("%w: split needs a table and a non-empty PartitionKey", ErrUsage)
	}
	var resp *pb.SplitResponse
	err := leaderCall(ctx, r.mc, func(ctx context.Context, c pb.MasterServiceClient) (err error) {
		resp, err = c.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: key, InGroup: o.inGroup})
		return err
	})
	if err != nil {
		return r.masterError("split", err)
	}
	res := Result{Op: "split", Table: table, PartitionKey: key, Ranges: descriptors(resp.GetLeft(), resp.GetRight())}
	return r.result(res, fmt.Sprintf("split table %s at %s: range %d keeps the keys below, range %d serves from it",
		table, quoteIfNeeded(key), resp.GetLeft().GetRangeId(), resp.GetRight().GetRangeId()))
}

func (r *runner) merge(ctx context.Context, _ *opts, args []string) error {
	id, err := parseRangeID(args[0])
	if err != nil {
		return err
	}
	var resp *pb.MergeResponse
	err = leaderCall(ctx, r.mc, func(ctx context.Context, c pb.MasterServiceClient) (err error) {
		resp, err = c.Merge(ctx, &pb.MergeRequest{RangeId: id})
		return err
	})
	if err != nil {
		return r.masterError("merge", err)
	}
	res := Result{Op: "merge", RangeID: id, Ranges: descriptors(resp.GetRange())}
	return r.result(res, fmt.Sprintf("merged range %d with its right neighbour", id))
}

// wholeUsage is the --whole flag's text of move and transfer-leader.
const wholeUsage = "act on the range's whole Raft group (every range it serves) instead of first taking the range out of its group; " +
	"always so for an anchor (a table named _groups/ and its range id), whose group is never taken apart (docs/range-groups.md)"

func (r *runner) move(ctx context.Context, o *opts, args []string) error {
	id, err := parseRangeID(args[0])
	if err != nil {
		return err
	}
	if o.to == "" {
		return fmt.Errorf("%w: move needs --to SERVER", ErrUsage)
	}
	var resp *pb.MoveResponse
	err = leaderCall(ctx, r.mc, func(ctx context.Context, c pb.MasterServiceClient) (err error) {
		resp, err = c.Move(ctx, &pb.MoveRequest{RangeId: id, ToServerId: o.to, FromServerId: o.from, Whole: o.whole})
		return err
	})
	if err != nil {
		return r.masterError("move", err)
	}
	res := Result{Op: "move", RangeID: id, To: o.to, From: o.from, Ranges: descriptors(resp.GetRange())}
	from := o.from
	if from == "" {
		from = "the replica the master picked"
	}
	if o.whole {
		return r.result(res, fmt.Sprintf("moved a replica of range %d's Raft group, every range it serves, from %s to %s", id, from, o.to))
	}
	return r.result(res, fmt.Sprintf("moved a replica of range %d from %s to %s", id, from, o.to))
}

func (r *runner) transferLeader(ctx context.Context, o *opts, args []string) error {
	id, err := parseRangeID(args[0])
	if err != nil {
		return err
	}
	if o.to == "" {
		return fmt.Errorf("%w: transfer-leader needs --to SERVER", ErrUsage)
	}
	err = leaderCall(ctx, r.mc, func(ctx context.Context, c pb.MasterServiceClient) error {
		_, err := c.TransferLeader(ctx, &pb.MasterTransferLeaderRequest{RangeId: id, ToServerId: o.to, Whole: o.whole})
		return err
	})
	if err != nil {
		return r.masterError("transfer-leader", err)
	}
	res := Result{Op: "transfer-leader", RangeID: id, To: o.to, Ranges: []Range{}}
	return r.result(res, fmt.Sprintf("leadership of range %d transferred to %s", id, o.to))
}

// master lists, adds or removes members of the master group.
func (r *runner) master(ctx context.Context, _ *opts, args []string) error {
	verb, rest := args[0], args[1:]
	want := map[string]int{"list": 0, "add": 2, "remove": 1}
	n, ok := want[verb]
	if !ok || len(rest) != n {
		return fmt.Errorf("%w: master takes list, add ID RAFT_ADDR or remove ID, got %q", ErrUsage, strings.Join(args, " "))
	}
	var resp *pb.ListMembersResponse
	call := func(ctx context.Context, c pb.MasterServiceClient) (err error) {
		switch verb {
		case "list":
			resp, err = c.ListMembers(ctx, &pb.ListMembersRequest{})
		case "add":
			resp, err = c.AddMember(ctx, &pb.AddMemberRequest{Id: rest[0], RaftAddr: rest[1]})
		case "remove":
			resp, err = c.RemoveMember(ctx, &pb.RemoveMemberRequest{Id: rest[0]})
		}
		return err
	}
	if err := leaderCall(ctx, r.mc, call); err != nil {
		return r.masterError("master "+verb, err)
	}
	members := make([]Member, 0, len(resp.GetMembers()))
	for _, m := range resp.GetMembers() {
		members = append(members, Member{ID: m.GetId(), RaftAddr: m.GetRaftAddr(), Voter: m.GetVoter(), Leader: m.GetLeader()})
	}
	if r.json != nil {
		for _, m := range members {
			if err := r.json.write(m); err != nil {
				return err
			}
		}
		return nil
	}
	switch verb {
	case "add":
		fmt.Fprintf(r.out, "master %s (%s) added\n", rest[0], rest[1])
	case "remove":
		fmt.Fprintf(r.out, "master %s removed\n", rest[0])
	}
	tw := newTable("ID", "RAFT ADDRESS", "VOTER", "LEADER")
	yes := map[bool]string{true: "yes", false: "no"}
	for _, m := range members {
		tw.add(m.ID, m.RaftAddr, yes[m.Voter], yes[m.Leader])
	}
	return tw.write(r.out)
}

// removeServer removes a partition server from the master's registry.
func (r *runner) removeServer(ctx context.Context, _ *opts, args []string) error {
	id := args[0]
	err := leaderCall(ctx, r.mc, func(ctx context.Context, c pb.MasterServiceClient) error {
		_, err := c.RemoveServer(ctx, &pb.RemoveServerRequest{ServerId: id})
		return err
	})
	if err != nil {
		return r.masterError("remove-server", err)
	}
	return r.result(Result{Op: "remove-server", Server: id, Ranges: []Range{}}, fmt.Sprintf("partition server %s removed", id))
}

// drain marks a server draining and follows the partition map until it
// holds no replica, printing its counts as they fall.
func (r *runner) drain(ctx context.Context, o *opts, args []string) error {
	id := args[0]
	call := func(ctx context.Context) error {
		return leaderCall(ctx, r.mc, func(ctx context.Context, c pb.MasterServiceClient) error {
			_, err := c.DrainServer(ctx, &pb.DrainServerRequest{ServerId: id, Undo: o.undo})
			return err
		})
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	err := call(cctx)
	cancel()
	if err != nil {
		return r.masterError("drain", err)
	}
	if o.undo || o.wait <= 0 {
		return r.drainProgress(ctx, id, o.undo)
	}
	deadline := time.Now().Add(o.wait)
	last := ""
	for {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		pm, err := r.partitionMap(cctx, "drain")
		cancel()
		if err != nil {
			return err
		}
		sv, ok := findServer(pm, id)
		if !ok {
			return fmt.Errorf("ctl: drain: server %s left the partition map", id)
		}
		line := fmt.Sprintf("%s: %d replicas, %d leaders", id, sv.Replicas, sv.Leaders)
		if line != last && r.json == nil {
			fmt.Fprintf(r.out, "%s  %s\n", r.env.now().Format("15:04:05"), line)
			last = line
		}
		if sv.Replicas == 0 {
			if r.json != nil {
				return r.json.write(sv)
			}
			fmt.Fprintf(r.out, "%s is drained: it holds no replica and can be removed\n", id)
			return nil
		}
		if time.Now().After(deadline) {
			why := ""
			if b := drainBlockers(pm, id); len(b) > 0 {
				why = "; " + strings.Join(b, "; ")
			}
			return fmt.Errorf("ctl: drain: %s still holds %d replicas after %v (it stays marked draining; ctl drain %s again to keep waiting)%s", id, sv.Replicas, o.wait, id, why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// drainBlockers says why replicas of server id may not move off it, by
// the partition map: the other servers that are down, and the ranges
// listing id that no live, non-draining server lacking a replica of them
// could take (at most maxBlocked named). Empty when every range has
// somewhere to go (the drain then only needs time). Pure.
func drainBlockers(pm *pb.PartitionMap, id string) []string {
	const maxBlocked = 5
	var out, down []string
	var open []string // live, not draining, other than id
	for _, sv := range pm.GetServers() {
		switch {
		case sv.GetServerId() == id:
		case !sv.GetAlive():
			down = append(down, sv.GetServerId())
		case !sv.GetDraining():
			open = append(open, sv.GetServerId())
		}
	}
	var blocked []string
	n := 0
	for _, d := range pm.GetRanges() {
		if !slices.ContainsFunc(d.GetReplicas(), func(r *pb.Replica) bool { return r.GetServerId() == id }) {
			continue
		}
		room := slices.ContainsFunc(open, func(s string) bool {
			return !slices.ContainsFunc(d.GetReplicas(), func(r *pb.Replica) bool { return r.GetServerId() == s })
		})
		if !room {
			n++
			if len(blocked) < maxBlocked {
				blocked = append(blocked, fmt.Sprint(d.GetRangeId()))
			}
		}
	}
	if n > 0 {
		more := ""
		if n > len(blocked) {
			more = fmt.Sprintf(" and %d more", n-len(blocked))
		}
		out = append(out, fmt.Sprintf("no live server that is not draining can take range %s%s (each such server already holds a replica of it)", strings.Join(blocked, ", "), more))
	}
	if len(down) > 0 {
		sort.Strings(down)
		out = append(out, fmt.Sprintf("servers down: %s", strings.Join(down, ", ")))
	}
	return out
}

// drainProgress prints the server's state once (drain --wait 0, --undo).
func (r *runner) drainProgress(ctx context.Context, id string, undo bool) error {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	pm, err := r.partitionMap(cctx, "drain")
	if err != nil {
		return err
	}
	sv, _ := findServer(pm, id)
	if r.json != nil {
		return r.json.write(sv)
	}
	state := "draining"
	if undo {
		state = "no longer draining"
	}
	_, err = fmt.Fprintf(r.out, "%s is %s: %d replicas, %d leaders\n", id, state, sv.Replicas, sv.Leaders)
	return err
}

func findServer(pm *pb.PartitionMap, id string) (Server, bool) {
	for _, s := range serversFromMap(pm) {
		if s.ServerID == id {
			return s, true
		}
	}
	return Server{}, false
}
