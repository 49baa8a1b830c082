package sim

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"tablestore/internal/cmdline"
)

// Main is `tablestore sim`: it parses args, runs the simulation, prints a
// summary to out and writes the reports asked for.
func Main(args []string, out io.Writer) error {
	cfg := DefaultConfig()
	fs, htmlPath, jsonPath := newFlagSet(&cfg, out)
	if err := cmdline.Parse(fs, args, out, "tablestore help sim lists the flags"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("sim: %w", err)
	}
	if fs.NArg() > 0 {
		return cmdline.Usagef("sim: unexpected argument %q", fs.Arg(0))
	}
	rep, err := Run(cfg)
	if err != nil {
		return err
	}
	fmt.Fprint(out, rep.Summary())
	if err := writeFile(*htmlPath, rep.WriteHTML); err != nil {
		return err
	}
	return writeFile(*jsonPath, rep.WriteJSON)
}

// newFlagSet is sim's command line bound to cfg and the report paths.
func newFlagSet(cfg *Config, out io.Writer) (fs *flag.FlagSet, htmlPath, jsonPath *string) {
	fs = flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(out)
	cfg.RegisterFlags(fs)
	htmlPath = fs.String("report-html", "", "write the report as a self-contained HTML page to this file")
	jsonPath = fs.String("report-json", "", "write the report as JSON to this file")
	return fs, htmlPath, jsonPath
}

// FlagSet returns the flags `tablestore sim` accepts, with their defaults
// (for checks of the docs).
func FlagSet() *flag.FlagSet {
	cfg := DefaultConfig()
	fs, _, _ := newFlagSet(&cfg, io.Discard)
	return fs
}

func writeFile(path string, write func(io.Writer) error) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("sim: report: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("sim: report %s: %w", path, err)
	}
	return f.Close()
}
