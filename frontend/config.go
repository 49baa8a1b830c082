package frontend

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
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
// A request is host-style (Azurite's "production-style URL") when HostStyle
// is set, the Host is not an IP address, has a dot, its first label is a
// served account (or its -secondary) and the first path segment is not an
// account; so with a Host such as
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
	// It bounds the connection too (http1.Server.RequestTimeout): the
	// request's body must have come by then, and its answer be written by
	// twice it, so a client that sends or reads slowly holds no more.
	RequestTimeout time.Duration
	// ReadHeaderTimeout and IdleTimeout tune the HTTP server (package http1)
	// (flags -read-header-timeout, -idle-timeout).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// Accounts, when set, replaces the single account above with several,
	// in Azurite's AZURITE_ACCOUNTS form "name:key1[:key2];name2:key1"
	// (flag -accounts, default the AZURITE_ACCOUNTS environment variable).
	// Each account's keys are all valid; accounts are isolated from each
	// other. AccountName still names the account whose tables are stored
	// under their plain names (see tableID).
	Accounts string
	// CertFile and KeyFile serve HTTPS with a PEM certificate and key;
	// CertFile ending in .pfx or .p12 is a PKCS#12 bundle opened with
	// CertPassword (flags -cert, -key, -pwd, as Azurite's).
	CertFile, KeyFile, CertPassword string
	// OAuth is "" (off) or "basic": accept Azure AD bearer tokens over
	// HTTPS, checking audience, issuer and lifetime but not the signature
	// (flag -oauth, as Azurite's).
	OAuth string
	// SkipAPIVersionCheck accepts any x-ms-version instead of answering an
	// unknown one with 400 InvalidHeaderValue (flag -skip-api-version-check,
	// Azurite's --skipApiVersionCheck).
	SkipAPIVersionCheck bool
	// Loose is Azurite's --loose ("ignore unsupported headers and
	// parameters"). tablestore never refuses a request for an unsupported
	// header or query parameter, so it changes nothing; it is accepted so
	// that Azurite command lines work unchanged.
	Loose bool
	// ClockSkew is how far a SharedKey request date may be from the server's
	// clock (flag -clock-skew; Azure allows 15 minutes).
	ClockSkew time.Duration
	// MetricsAddr and PprofAddr are where the process serves /metrics
	// (with /healthz, /readyz, /version) and /debug/pprof ("" when off),
	// not flags: set by the command from its --metrics-addr and
	// --pprof-addr, and told to the masters on the partition map watch
	// (`tablestore ctl frontends`, `ctl debug zip`).
	MetricsAddr string
	PprofAddr   string
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
	if _, err := ParseAccounts(c.Accounts); err != nil {
		return err
	}
	if (c.CertFile == "") != (c.KeyFile == "" && !isPFX(c.CertFile)) {
		return errors.New("frontend: --cert and --key go together (a .pfx --cert needs only --pwd)")
	}
	switch c.OAuth {
	case "":
	case "basic":
		if c.CertFile == "" {
			return errors.New("frontend: oauth basic needs HTTPS (cert and key), as bearer tokens are refused over HTTP")
		}
	default:
		return fmt.Errorf("frontend: oauth %q: the only level is basic", c.OAuth)
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
	c.RegisterEmulatorFlags(fs)
}

// RegisterEmulatorFlags binds the settings that mirror Azurite's switches
// (shared by `tablestore frontend` and `tablestore dev`), each Azurite
// switch under its kebab-case name (--skipApiVersionCheck is
// --skip-api-version-check).
func (c *Config) RegisterEmulatorFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Accounts, "accounts", c.Accounts, "accounts and keys served, Azurite's AZURITE_ACCOUNTS form name:key1[:key2];name2:key1 (default: the AZURITE_ACCOUNTS environment variable, else account-name/account-key)")
	fs.StringVar(&c.CertFile, "cert", c.CertFile, "serve HTTPS with this PEM certificate (with -key) or PKCS#12 .pfx/.p12 bundle (with -pwd)")
	fs.StringVar(&c.KeyFile, "key", c.KeyFile, "PEM private key of -cert")
	fs.StringVar(&c.CertPassword, "pwd", c.CertPassword, "password of a .pfx/.p12 -cert")
	fs.StringVar(&c.OAuth, "oauth", c.OAuth, `"basic": accept OAuth bearer tokens (HTTPS only; audience, issuer and expiry checked, signature not)`)
	fs.BoolVar(&c.SkipAPIVersionCheck, "skip-api-version-check", c.SkipAPIVersionCheck, "accept any x-ms-version (else an unknown one is 400 InvalidHeaderValue); Azurite's --skipApiVersionCheck")
	fs.BoolFunc("disable-product-style-url", "never read the account from the Host (<account>.table.localhost); path-style only (a front-end's -host-style=false); Azurite's --disableProductStyleUrl",
		func(v string) error {
			b, err := strconv.ParseBool(v)
			c.HostStyle = c.HostStyle && !b
			return err
		})
	fs.BoolVar(&c.Loose, "loose", c.Loose, "Azurite's --loose; tablestore already ignores unsupported headers and parameters, so this changes nothing")
}

// isPFX reports whether a certificate file is a PKCS#12 bundle, by name as
// Azurite decides.
func isPFX(name string) bool {
	n := strings.ToLower(name)
	return strings.HasSuffix(n, ".pfx") || strings.HasSuffix(n, ".p12")
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
