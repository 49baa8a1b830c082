package ctl

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"tablestore/internal/masterclient"
	"tablestore/internal/peertls"
)

// Config holds the flags every ctl command accepts, before or after the
// command name.
type Config struct {
	// Masters is the comma-separated list of master gRPC addresses; ctl
	// follows whichever of them leads.
	Masters string
	// JSON switches the output to one JSON object per line.
	JSON bool
	// Timeout bounds each command (finding the leader included). With
	// `events --follow` it bounds how long ctl keeps trying to reach a master
	// after losing the stream, not the whole run; with `debug zip` each
	// request to the master (a zip of a large cluster asks every process).
	Timeout time.Duration
	// TLS is the client certificate for masters that require mutual TLS.
	TLS peertls.Config
}

// DefaultConfig returns the documented defaults: the dev master.
func DefaultConfig() Config {
	return Config{Masters: "127.0.0.1:7000", Timeout: 30 * time.Second}
}

// Validate reports invalid settings.
func (c *Config) Validate() error {
	var errs []error
	if len(masterclient.ParseAddrs(c.Masters)) == 0 {
		errs = append(errs, errors.New("--master names no address"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("--timeout must be positive"))
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return nil
}

// RegisterFlags binds the settings to flags of fs, with the current values
// as defaults (so flags given before the command carry into the command's
// own flag set).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Masters, "master", c.Masters, "comma-separated master gRPC addresses, every master (ctl looks for the leader among them)")
	fs.BoolVar(&c.JSON, "json", c.JSON, "print one JSON object per line instead of tables")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "time limit of the command, finding the master leader included (events --follow: of each reconnection; debug zip: of each request to the master)")
	c.TLS.RegisterFlags(fs)
}
