// Command tablestore runs one role of the tablestore cluster, or all of them
// in one process (dev). It only parses flags and starts the role's package.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"tablestore/cluster"
	"tablestore/ctl"
	"tablestore/frontend"
	"tablestore/frontend/auth"
	"tablestore/frontend/router"
	"tablestore/internal/buildinfo"
	"tablestore/internal/cmdline"
	"tablestore/internal/failpoint"
	"tablestore/internal/health"
	"tablestore/internal/logging"
	"tablestore/internal/metricsbridge"
	"tablestore/loadgen"
	"tablestore/master"
	"tablestore/partitionserver"
	"tablestore/sim"
)

type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{
	"dev":             {"one master, three partition servers and one front-end in one process (Azurite-compatible endpoint)", runDev},
	"master":          {"a master (control plane) of a Raft group of masters", runMaster},
	"partitionserver": {"a partition server hosting range replicas", runPartitionServer},
	"frontend":        {"an Azure Table REST API front-end", runFrontend},
	"ctl":             {"operator commands on the master: ranges, servers, events, split, merge, move, transfer-leader, drain, remove-server, frontends, master, debug zip", runCtl},
	"loadgen":         {"load generator through the Azure SDK: uniform, hot-partition, append, append-hashed, moving-hot, zipf", runLoadgen},
	"version":         {"print the module version and VCS commit this binary was built from", runVersion},
	"sim":             {"run the master's scheduler against a simulated cluster (e.g. 1,000 servers) and report", runSim},
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		if len(os.Args) >= 3 && os.Args[1] == "help" {
			c, ok := commands[os.Args[2]]
			if !ok {
				fmt.Fprintf(os.Stderr, "tablestore: help: unknown command %q\n\n", os.Args[2])
				usage(os.Stderr)
				os.Exit(2)
			}
			usage(os.Stdout)
			c.run([]string{"-h"})
			return
		}
		usage(os.Stdout)
		return
	}
	if err := failpoint.EnableFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "tablestore:", err)
		os.Exit(2)
	}
	if err := failpoint.ServeFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "tablestore:", err)
		os.Exit(2)
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "tablestore: unknown command %q\n\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	if err := c.run(os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		// ctl --json wrote the error as JSON already.
		var reported *ctl.ReportedError
		if !errors.As(err, &reported) {
			fmt.Fprintln(os.Stderr, "tablestore:", err)
		}
		if errors.Is(err, cmdline.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageOf names command in a command-line error (-h passes as is).
func usageOf(command string, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%s: %w", command, err)
}

// seeFlags is where a command's flags are listed, for its usage errors.
func seeFlags(command string) string {
	return "tablestore help " + command + " lists the flags"
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: tablestore <command> [flags]   (tablestore help <command> for its flags)")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-16s %s\n", n, commands[n].summary)
	}
}

// common are the flags every server role has.
type common struct {
	logLevel    string
	metricsAddr string
	pprofAddr   string
	pprofBound  string // the address pprof listens on ("" when off)
	metricsNote string // how a derived metricsAddr came about
	// subsystems are the role's metric families' subsystems (nil in dev,
	// which runs every role: all of them).
	subsystems []string
	metrics    *metricsbridge.Listener
}

func (c *common) register(fs *flag.FlagSet, metricsDefault, metricsHelp string) {
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.metricsAddr, "metrics-addr", metricsDefault, metricsHelp)
	fs.StringVar(&c.pprofAddr, "pprof-addr", "", "listen address of /debug/pprof (empty: off; keep it on loopback)")
}

func (c *common) start() (*slog.Logger, error) {
	logger, err := logging.New(os.Stderr, c.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	slog.SetDefault(logger)
	metricsbridge.InstallRaftSink()
	if c.metrics, err = metricsbridge.Serve(c.metricsAddr, c.subsystems...); err != nil {
		return nil, fmt.Errorf("--metrics-addr %s%s: %w", c.metricsAddr, c.metricsNote, err)
	}
	if c.pprofBound, err = metricsbridge.ServePprof(c.pprofAddr); err != nil {
		return nil, fmt.Errorf("--pprof-addr %s: %w", c.pprofAddr, err)
	}
	return logger, nil
}

func waitForSignal() os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	return <-ch
}

// role is a started server role: how to stop it and whether it is ready.
type role struct {
	stop  func() error
	ready func() health.Verdict
}

// spec describes a server role's command.
type spec struct {
	name           string
	metricsDefault string
	metricsHelp    string // "" for the default wording
	register       func(*flag.FlagSet)
	// prepare runs after flag parsing, before any listener opens (optional).
	prepare func(*common) error
	start   func(*slog.Logger, *common) (role, error)
}

// flagSet is the role's command line: its own flags and the common ones
// bound to cm. serve parses it; docs_test.go reads it.
func (sp spec) flagSet(cm *common) *flag.FlagSet {
	fs := flag.NewFlagSet(sp.name, flag.ContinueOnError)
	fs.SetOutput(os.Stdout)
	sp.register(fs)
	help := sp.metricsHelp
	if help == "" {
		help = "listen address of /metrics, /healthz, /readyz and /version (empty: off)"
	}
	cm.register(fs, sp.metricsDefault, help)
	return fs
}

// serve parses a server role's flags, starts it, serves /healthz and
// /readyz beside /metrics, and stops it on SIGINT or SIGTERM.
func serve(sp spec, args []string) error {
	cm := common{subsystems: metricsbridge.RoleSubsystems[sp.name]}
	fs := sp.flagSet(&cm)
	if err := cmdline.Parse(fs, args, os.Stdout, seeFlags(sp.name)); err != nil {
		return usageOf(sp.name, err)
	}
	if fs.NArg() > 0 {
		return cmdline.Usagef("%s: unexpected argument %q (flags are --name=value)", sp.name, fs.Arg(0))
	}
	if sp.prepare != nil {
		if err := sp.prepare(&cm); err != nil {
			return err
		}
	}
	logger, err := cm.start()
	if err != nil {
		return fmt.Errorf("%s: %w", sp.name, err)
	}
	// /healthz and /readyz answer from the start: a role that waits at
	// start (a front-end for a master, with --start-timeout 0) is alive
	// and not ready, rather than absent to its probes.
	var started atomic.Pointer[func() health.Verdict]
	health.Mount(cm.metrics, func() health.Verdict {
		if ready := started.Load(); ready != nil {
			return (*ready)()
		}
		var v health.Verdict
		v.Notf("%s starting", sp.name)
		return v
	})
	r, err := sp.start(logger, &cm)
	if err != nil {
		return err
	}
	started.Store(&r.ready)
	sig := waitForSignal()
	logger.Info("shutting down", "signal", sig.String())
	return stopWithin(r.stop, shutdownBound, logger)
}

// shutdownBound is the longest a role may take to stop after SIGTERM; the
// roles bound their own work well within it (partitionserver's
// --shutdown-timeout), this is the backstop.
const shutdownBound = 10 * time.Second

// stopWithin runs stop and returns its error, or gives up after d (or on
// a second signal) so the process exits: what a role had not finished is
// what a crash would leave, which every role recovers from.
func stopWithin(stop func() error, d time.Duration, logger *slog.Logger) error {
	done := make(chan error, 1)
	go func() { done <- stop() }()
	again := make(chan os.Signal, 1)
	signal.Notify(again, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(again)
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		logger.Error("shutdown did not finish in time; exiting", "after", d)
	case sig := <-again:
		logger.Error("second signal during shutdown; exiting", "signal", sig.String())
	}
	return nil
}

// devMetricsAuto is dev's --metrics-addr default: the port after the
// endpoint's (10003 beside 10002), so a first run needs no free 9090.
const devMetricsAuto = "auto"

func runDev(args []string) error { return serve(devSpec(), args) }

// devSpec is dev's command: every role in one process.
func devSpec() spec {
	cfg := cluster.DefaultDevConfig()
	cfg.Frontend.Accounts = os.Getenv(frontend.AccountsEnv)
	prepare := func(cm *common) error {
		if cm.metricsAddr == devMetricsAuto {
			addr, err := nextPort(cfg.FrontendAddr)
			if err != nil {
				return fmt.Errorf("dev: --frontend-addr %s: %w", cfg.FrontendAddr, err)
			}
			cm.metricsAddr, cm.metricsNote = addr, " (the --frontend-addr port + 1; set --metrics-addr to move it)"
		}
		if err := cfg.Keys.Resolve(&cfg.Frontend, os.Getenv); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		return nil
	}
	start := func(logger *slog.Logger, cm *common) (role, error) {
		// Every role of the process names the one listener: ctl debug
		// zip asks it once (by address), as the master's.
		cfg.Master.MetricsAddr, cfg.Master.PprofAddr = cm.metrics.Addr(), cm.pprofBound
		cfg.Server.MetricsAddr, cfg.Server.PprofAddr = cm.metrics.Addr(), cm.pprofBound
		cfg.Frontend.MetricsAddr, cfg.Frontend.PprofAddr = cm.metrics.Addr(), cm.pprofBound
		c, err := cluster.StartDev(cfg, logger)
		if err != nil {
			return role{}, err
		}
		cm.metrics.Handle("/dashboard", c.Masters[0].Server.DashboardHandler())
		cm.metrics.Handle("/dashboard/", c.Masters[0].Server.DashboardHandler())
		fmt.Printf("tablestore dev is ready.\nTable endpoint: %s\nConnection string:\n%s\n", c.Endpoint(0), c.ConnectionString(0))
		if a := cm.metrics.Addr(); a != "" {
			fmt.Printf("Dashboard: http://%s/dashboard  Metrics: http://%s/metrics  Ready: http://%s/readyz\n", a, a, a)
		}
		// Internal ports are picked at start unless --base-port is given, so
		// ctl needs the master's address.
		fmt.Printf("Control:   tablestore ctl --master %s ranges\n", strings.Join(c.MasterAddrs(), ","))
		return role{stop: func() error { c.Close(); return nil }, ready: c.Ready}, nil
	}
	return spec{name: "dev", metricsDefault: devMetricsAuto, register: cfg.RegisterFlags, prepare: prepare, start: start,
		metricsHelp: "listen address of /metrics, /healthz, /readyz, /version and /dashboard (auto: the --frontend-addr port + 1; empty: off)"}
}

// nextPort is addr with its port plus one (":0" stays ":0").
func nextPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p >= 65535 {
		return "", fmt.Errorf("bad port %q", port)
	}
	if p == 0 {
		return addr, nil
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}

func runMaster(args []string) error { return serve(masterSpec(), args) }

func masterSpec() spec {
	cfg := master.DefaultConfig()
	return spec{name: "master", register: cfg.RegisterFlags, start: func(logger *slog.Logger, cm *common) (role, error) {
		// What ListMembers answers about this master (ctl debug zip).
		cfg.MetricsAddr, cfg.PprofAddr = cm.metrics.Addr(), cm.pprofBound
		s, err := master.New(cfg, logger)
		if err != nil {
			return role{}, err
		}
		if err := s.Start(); err != nil {
			return role{}, err
		}
		cm.metrics.Handle("/dashboard", s.DashboardHandler())
		cm.metrics.Handle("/dashboard/", s.DashboardHandler())
		return role{stop: s.Close, ready: s.Ready}, nil
	}}
}

func runPartitionServer(args []string) error { return serve(partitionServerSpec(), args) }

func partitionServerSpec() spec {
	cfg := partitionserver.DefaultConfig()
	return spec{name: "partitionserver", register: cfg.RegisterFlags, start: func(logger *slog.Logger, cm *common) (role, error) {
		// Registered with the master for ctl debug zip.
		cfg.MetricsAddr, cfg.PprofAddr = cm.metrics.Addr(), cm.pprofBound
		s, err := partitionserver.New(cfg, logger)
		if err != nil {
			return role{}, err
		}
		if err := s.Start(); err != nil {
			return role{}, err
		}
		return role{stop: s.Close, ready: s.Ready}, nil
	}}
}

// frontendGCPercent is a front-end's GOGC unless the environment sets one.
const frontendGCPercent = 400

func runFrontend(args []string) error { return serve(frontendSpec(), args) }

func frontendSpec() spec {
	fcfg, rcfg := frontend.DefaultConfig(), router.DefaultConfig()
	var keys frontend.KeySource
	fcfg.Accounts = os.Getenv(frontend.AccountsEnv)
	register := func(fs *flag.FlagSet) {
		fcfg.RegisterFlags(fs)
		keys.RegisterFlags(fs)
		rcfg.RegisterFlags(fs)
	}
	prepare := func(*common) error { return keys.Resolve(&fcfg, os.Getenv) }
	start := func(logger *slog.Logger, cm *common) (role, error) {
		// Told to the masters on the map watch (ctl frontends, debug zip).
		fcfg.MetricsAddr, fcfg.PprofAddr = cm.metrics.Addr(), cm.pprofBound
		if os.Getenv("GOGC") == "" {
			// A front-end's heap is the partition map and per-request
			// garbage (headers, the entity decoded and re-encoded as
			// JSON): at the default GOGC its collector and allocation
			// slow path were ~10 % of its CPU per point read. See
			// docs/performance.md, "Point reads, session 7".
			debug.SetGCPercent(frontendGCPercent)
		}
		if fcfg.AccountKey == auth.DevAccountKey {
			logger.Warn("serving Azurite's well-known public account key: set --account-key-file or $" + frontend.AccountKeyEnv + " before storing anything that matters")
		}
		n, err := cluster.StartFrontend(fcfg, rcfg, logger)
		if err != nil {
			return role{}, err
		}
		return role{stop: func() error { n.Close(); return nil }, ready: n.Router.Ready}, nil
	}
	return spec{name: "frontend", register: register, prepare: prepare, start: start}
}

// serverSpecs are the server roles' commands by name.
var serverSpecs = map[string]func() spec{
	"dev": devSpec, "master": masterSpec, "partitionserver": partitionServerSpec, "frontend": frontendSpec,
}

// runCtl runs ctl; without --master it talks to the dev cluster whose data
// is in dev's default --data-dir (dev writes its master's address there).
func runCtl(args []string) error {
	args, path := withDevMaster(args)
	if path == "" || !devMasterGone(args[0][len("--master="):]) {
		return ctl.Run(args, os.Stdout, os.Stderr)
	}
	// dev wrote the address at its start and nothing listens there now:
	// dev is not running here, and ctl would retry the address for its
	// whole --timeout (30 s) before saying so. A --timeout given wins.
	err := ctl.Run(append([]string{"--timeout=1s"}, args...), os.Stdout, os.Stderr)
	var reported *ctl.ReportedError
	if err == nil || errors.As(err, &reported) {
		return err
	}
	return fmt.Errorf("%w (the address is %s's, written by tablestore dev at its start: is it running? make run starts it; --master names another master)", err, path)
}

// devMasterGone reports whether a dial of addr, dev's master's address,
// is refused at once: no process listens there.
func devMasterGone(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// withDevMaster adds --master=ADDR (first) to args that set no --master
// when dev's default --data-dir holds its master's address, and returns
// the file's path ("" when it added nothing): dev picks its internal
// ports free at each start, so the flags' default (127.0.0.1:7000) is the
// dev master only with --base-port 7000.
func withDevMaster(args []string) ([]string, string) {
	if hasFlag(args, "master") {
		return args, ""
	}
	path := filepath.Join(cluster.DefaultDevConfig().DataDir, cluster.MasterAddrFile)
	b, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(b)) == "" {
		return args, ""
	}
	return append([]string{"--master=" + strings.TrimSpace(string(b))}, args...), path
}

// hasFlag reports whether args set flag name (-name, --name, -name=v).
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// runLoadgen runs loadgen; without --master its --report reads the dev
// cluster's master, as ctl does.
func runLoadgen(args []string) error {
	args, _ = withDevMaster(args)
	return loadgen.Run(args, os.Stdout, os.Stderr)
}

func runVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := cmdline.Parse(fs, args, os.Stdout, "it takes none"); err != nil {
		return usageOf("version", err)
	}
	if fs.NArg() > 0 {
		return cmdline.Usagef("version: unexpected argument %q (it takes none)", fs.Arg(0))
	}
	fmt.Println(versionLine())
	return nil
}

// versionLine is "tablestore VERSION commit REV[+dirty] (TIME) GOVERSION".
func versionLine() string { return buildinfo.Line() }

func runSim(args []string) error { return sim.Main(args, os.Stdout) }
