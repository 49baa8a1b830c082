package frontend

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"tablestore/frontend/auth"
)

// Default limits. DefaultMaxBodyBytes is the service's: a request body
// (a $batch with its multipart framing included) over 4 MiB is 413
// RequestBodyTooLarge; a single entity is capped at 1 MiB by edm.Validate
// long before that.
const (
	DefaultHTTPAddr       = "127.0.0.1:10002"
	DefaultMaxBodyBytes   = 4 << 20
	DefaultRequestTimeout = 30 * time.Second
)

// Config configures the front-end HTTP server.
//
// # Account addressing
//
// Requests may address the account in two ways, both always accepted:
//
//   - path-style (the emulator's, and dev mode's): the first path segment is
//     the account name, as in http://127.0.0.1:10002/devstoreaccount1/tbl().
//   - host-style (the cloud's): the first label of the Host header is the
//     account name (devstoreaccount1.table.example.com) and the path is the
//     resource itself (/tbl()). Disable with HostStyle=false.
//
// A request is host-style when HostStyle is set, the Host's first label
// equals the account name (case-insensitively) and the first path segment is
// not the account name; so with a Host such as
// devstoreaccount1.table.localhost the path-style URL works too. A table
// named exactly like the account is therefore unreachable host-style when
// its path starts with it; Azure account names (3-24 lowercase letters and
// digits) rarely collide with table names in practice.
type Config struct {
	// HTTPAddr is the listen address (flag -http-addr).
	HTTPAddr string
	// AccountName is the single storage account served (flag -account-name).
	AccountName string
	// AccountKey is its base64 key (flag -account-key).
	AccountKey string
	// HostStyle also accepts host-style addressing (flag -host-style).
	HostStyle bool
	// MaxBodyBytes caps a request body; larger bodies get 413
	// RequestBodyTooLarge (flag -max-body-bytes).
	MaxBodyBytes int64
	// RequestTimeout bounds the work done for one request, including the
	// backend's retries; past it the client gets 500 OperationTimedOut
	// (flag -request-timeout). A smaller "timeout" query parameter wins.
	RequestTimeout time.Duration
	// ReadHeaderTimeout and IdleTimeout tune the net/http server
	// (flags -read-header-timeout, -idle-timeout).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// SkipAPIVersionCheck accepts any x-ms-version instead of answering an
	// unknown one with 400 InvalidHeaderValue (flag -skip-api-version-check,
	// Azurite's --skipApiVersionCheck).
	SkipAPIVersionCheck bool
	// ClockSkew is how far a SharedKey request date may be from the server's
	// clock (flag -clock-skew; Azure allows 15 minutes).
	ClockSkew time.Duration
}

// DefaultConfig returns the documented defaults: the emulator's address,
// account and key, so every tool set up for Azurite works unchanged.
func DefaultConfig() Config {
	return Config{
		HTTPAddr:          DefaultHTTPAddr,
		AccountName:       auth.DevAccountName,
		AccountKey:        auth.DevAccountKey,
		HostStyle:         true,
		MaxBodyBytes:      DefaultMaxBodyBytes,
		RequestTimeout:    DefaultRequestTimeout,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ClockSkew:         auth.DefaultClockSkew,
	}
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	if c.HTTPAddr == "" {
		return errors.New("frontend: http-addr must not be empty")
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return fmt.Errorf("frontend: http-addr %q: %w", c.HTTPAddr, err)
	}
	if !validAccountName(c.AccountName) {
		return fmt.Errorf("frontend: account-name %q must be 3-24 lowercase letters and digits", c.AccountName)
	}
	if k, err := base64.StdEncoding.DecodeString(c.AccountKey); err != nil || len(k) == 0 {
		return errors.New("frontend: account-key must be non-empty base64")
	}
	if c.MaxBodyBytes < 1<<20 {
		return fmt.Errorf("frontend: max-body-bytes %d is below 1 MiB, the size of one entity", c.MaxBodyBytes)
	}
	if c.RequestTimeout <= 0 {
		return errors.New("frontend: request-timeout must be positive")
	}
	if c.ReadHeaderTimeout < 0 || c.IdleTimeout < 0 || c.ClockSkew < 0 {
		return errors.New("frontend: timeouts must not be negative")
	}
	return nil
}

// RegisterFlags binds the settings to fs with the current values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "listen address of the Azure Table REST API")
	fs.StringVar(&c.AccountName, "account-name", c.AccountName, "storage account name served (path-style: the first path segment)")
	fs.StringVar(&c.AccountKey, "account-key", c.AccountKey, "base64 account key for SharedKey/SharedKeyLite/SAS (default: Azurite's well-known key)")
	fs.BoolVar(&c.HostStyle, "host-style", c.HostStyle, "also accept host-style addressing (Host: <account>.…, path without the account)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest accepted request body in bytes (413 RequestBodyTooLarge beyond)")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "longest time spent on one request (500 OperationTimedOut beyond)")
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", c.ReadHeaderTimeout, "longest time to read a request's headers")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "how long an idle keep-alive connection stays open")
	fs.DurationVar(&c.ClockSkew, "clock-skew", c.ClockSkew, "largest accepted difference between a signed request's date and server time")
}

// validAccountName applies Azure's rule for storage account names.
func validAccountName(s string) bool {
	if len(s) < 3 || len(s) > 24 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
