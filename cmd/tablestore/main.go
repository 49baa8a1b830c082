// Command tablestore runs one role of the tablestore cluster, or all of them
// in one process (dev). It only parses flags and starts the role's package.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"tablestore/ctl"
	"tablestore/frontend"
	"tablestore/frontend/router"
	"tablestore/internal/cluster"
	"tablestore/internal/failpoint"
	"tablestore/internal/logging"
	"tablestore/internal/metricsbridge"
	"tablestore/loadgen"
	"tablestore/master"
	"tablestore/partitionserver"
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
	"ctl":             {"operator commands on the master: ranges, servers, events, split, merge, move, transfer-leader", runCtl},
	"loadgen":         {"load generator through the Azure SDK: uniform, hot-partition, append, zipf", runLoadgen},
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage(os.Stdout)
		if len(os.Args) >= 3 {
			if c, ok := commands[os.Args[2]]; ok {
				c.run([]string{"-h"})
			}
		}
		return
	}
	if err := failpoint.EnableFromEnv(); err != nil {
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
		fmt.Fprintln(os.Stderr, "tablestore:", err)
		os.Exit(1)
	}
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

// common are the flags every role has.
type common struct {
	logLevel    string
	metricsAddr string
	metrics     *metricsbridge.Listener
}

func (c *common) register(fs *flag.FlagSet, metricsDefault string) {
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.metricsAddr, "metrics-addr", metricsDefault, "listen address of /metrics (empty: off)")
}

func (c *common) start() (*slog.Logger, error) {
	logger, err := logging.New(os.Stderr, c.logLevel)
	if err != nil {
		return nil, err
	}
	slog.SetDefault(logger)
	metricsbridge.InstallRaftSink()
	m, err := metricsbridge.Serve(c.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	c.metrics = m
	return logger, nil
}

func waitForSignal() os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	return <-ch
}

// serve parses a server role's flags, starts it, and stops it on SIGINT or
// SIGTERM.
func serve(name string, args []string, metricsDefault string, register func(*flag.FlagSet),
	start func(*slog.Logger, *metricsbridge.Listener) (stop func() error, err error)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	register(fs)
	var cm common
	cm.register(fs, metricsDefault)
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger, err := cm.start()
	if err != nil {
		return err
	}
	stop, err := start(logger, cm.metrics)
	if err != nil {
		return err
	}
	sig := waitForSignal()
	logger.Info("shutting down", "signal", sig.String())
	return stop()
}

func runDev(args []string) error {
	cfg := cluster.DefaultDevConfig()
	return serve("dev", args, "127.0.0.1:9090", cfg.RegisterFlags, func(logger *slog.Logger, m *metricsbridge.Listener) (func() error, error) {
		c, err := cluster.StartDev(cfg, logger)
		if err != nil {
			return nil, err
		}
		m.Handle("/dashboard", c.Masters[0].Server.DashboardHandler())
		m.Handle("/dashboard/", c.Masters[0].Server.DashboardHandler())
		fmt.Printf("tablestore dev is ready.\nTable endpoint: %s\nConnection string:\n%s\n", c.Endpoint(0), c.ConnectionString(0))
		return func() error { c.Close(); return nil }, nil
	})
}

func runMaster(args []string) error {
	cfg := master.DefaultConfig()
	return serve("master", args, "", cfg.RegisterFlags, func(logger *slog.Logger, m *metricsbridge.Listener) (func() error, error) {
		s, err := master.New(cfg, logger)
		if err != nil {
			return nil, err
		}
		m.Handle("/dashboard", s.DashboardHandler())
		m.Handle("/dashboard/", s.DashboardHandler())
		return s.Close, s.Start()
	})
}

func runPartitionServer(args []string) error {
	cfg := partitionserver.DefaultConfig()
	return serve("partitionserver", args, "", cfg.RegisterFlags, func(logger *slog.Logger, _ *metricsbridge.Listener) (func() error, error) {
		s, err := partitionserver.New(cfg, logger)
		if err != nil {
			return nil, err
		}
		return s.Close, s.Start()
	})
}

func runFrontend(args []string) error {
	fcfg, rcfg := frontend.DefaultConfig(), router.DefaultConfig()
	register := func(fs *flag.FlagSet) {
		fcfg.RegisterFlags(fs)
		rcfg.RegisterFlags(fs)
	}
	return serve("frontend", args, "", register, func(logger *slog.Logger, _ *metricsbridge.Listener) (func() error, error) {
		n, err := cluster.StartFrontend(fcfg, rcfg, logger)
		if err != nil {
			return nil, err
		}
		return func() error { n.Close(); return nil }, nil
	})
}

func runCtl(args []string) error { return ctl.Run(args, os.Stdout, os.Stderr) }

func runLoadgen(args []string) error { return loadgen.Run(args, os.Stdout, os.Stderr) }
