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
	if _, err := metricsbridge.Serve(c.metricsAddr); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return logger, nil
}

func waitForSignal() os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	return <-ch
}

func runDev(args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	cfg := cluster.DefaultDevConfig()
	cfg.RegisterFlags(fs)
	var cm common
	cm.register(fs, "127.0.0.1:9090")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger, err := cm.start()
	if err != nil {
		return err
	}
	c, err := cluster.StartDev(cfg, logger)
	if err != nil {
		return err
	}
	fmt.Printf("tablestore dev is ready.\nTable endpoint: %s\nConnection string:\n%s\n", c.Endpoint(0), c.ConnectionString(0))
	sig := waitForSignal()
	logger.Info("shutting down", "signal", sig.String())
	c.Close()
	return nil
}

func runMaster(args []string) error {
	fs := flag.NewFlagSet("master", flag.ContinueOnError)
	cfg := master.DefaultConfig()
	cfg.RegisterFlags(fs)
	var cm common
	cm.register(fs, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger, err := cm.start()
	if err != nil {
		return err
	}
	s, err := master.New(cfg, logger)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	sig := waitForSignal()
	logger.Info("shutting down", "signal", sig.String())
	return s.Close()
}

func runPartitionServer(args []string) error {
	fs := flag.NewFlagSet("partitionserver", flag.ContinueOnError)
	cfg := partitionserver.DefaultConfig()
	cfg.RegisterFlags(fs)
	var cm common
	cm.register(fs, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger, err := cm.start()
	if err != nil {
		return err
	}
	s, err := partitionserver.New(cfg, logger)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	sig := waitForSignal()
	logger.Info("shutting down", "signal", sig.String())
	return s.Close()
}

func runFrontend(args []string) error {
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	fcfg := frontend.DefaultConfig()
	fcfg.RegisterFlags(fs)
	rcfg := router.DefaultConfig()
	rcfg.RegisterFlags(fs)
	var cm common
	cm.register(fs, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger, err := cm.start()
	if err != nil {
		return err
	}
	n, err := cluster.StartFrontend(fcfg, rcfg, logger)
	if err != nil {
		return err
	}
	sig := waitForSignal()
	logger.Info("shutting down", "signal", sig.String())
	n.Close()
	return nil
}

func runCtl(args []string) error { return ctl.Run(args, os.Stdout, os.Stderr) }

func runLoadgen(args []string) error { return loadgen.Run(args, os.Stdout, os.Stderr) }
