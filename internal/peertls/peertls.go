package peertls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Errors of the package.
var (
	// ErrIncomplete: some but not all of cert, key and CA were given.
	ErrIncomplete = errors.New("peertls: --tls-cert, --tls-key and --tls-ca go together")
	// ErrBadFile: a certificate, key or CA file cannot be read or parsed.
	ErrBadFile = errors.New("peertls: bad certificate file")
)

// Config names the files. All empty: plaintext.
type Config struct {
	// CertFile and KeyFile are this process's certificate (PEM), used as
	// both server and client certificate: it needs the serverAuth and
	// clientAuth extended key usages and the names/IPs others dial it by.
	CertFile, KeyFile string
	// CAFile holds the PEM certificates that sign every role's certificate.
	CAFile string
}

// RegisterFlags binds the kebab-case flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CertFile, "tls-cert", c.CertFile, "PEM certificate for mutual TLS between roles (gRPC and Raft); with --tls-key and --tls-ca (empty: plaintext)")
	fs.StringVar(&c.KeyFile, "tls-key", c.KeyFile, "PEM private key of --tls-cert")
	fs.StringVar(&c.CAFile, "tls-ca", c.CAFile, "PEM CA certificates that sign every role's certificate")
}

// Enabled reports whether TLS is configured.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// Validate checks that the files go together and load.
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	if c.CertFile == "" || c.KeyFile == "" || c.CAFile == "" {
		return ErrIncomplete
	}
	_, err := c.Load()
	return err
}

// Load reads the files. A nil *Creds (TLS not configured) is valid and
// means plaintext everywhere.
func (c Config) Load() (*Creds, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if c.CertFile == "" || c.KeyFile == "" || c.CAFile == "" {
		return nil, ErrIncomplete
	}
	cr := &Creds{cfg: c}
	if err := cr.reload(); err != nil {
		return nil, err
	}
	return cr, nil
}

// Creds serves and dials with the configured certificates.
type Creds struct {
	cfg Config

	mu      sync.Mutex
	cert    *tls.Certificate
	pool    *x509.CertPool
	mtimes  [3]time.Time
	checked time.Time
}

func (c *Creds) reload() error {
	var mt [3]time.Time
	for i, f := range []string{c.cfg.CertFile, c.cfg.KeyFile, c.cfg.CAFile} {
		st, err := os.Stat(f)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadFile, err)
		}
		mt[i] = st.ModTime()
	}
	if c.cert != nil && mt == c.mtimes {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(c.cfg.CertFile, c.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("%w: %s / %s: %v", ErrBadFile, c.cfg.CertFile, c.cfg.KeyFile, err)
	}
	caPEM, err := os.ReadFile(c.cfg.CAFile)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%w: %s holds no PEM certificate", ErrBadFile, c.cfg.CAFile)
	}
	c.cert, c.pool, c.mtimes = &cert, pool, mt
	return nil
}

// current returns the certificate and CA pool, re-reading the files at
// most once a second if they changed; a failed re-read keeps the last good
// ones (a half-written secret update must not cut the cluster off).
func (c *Creds) current() (*tls.Certificate, *x509.CertPool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) > time.Second {
		c.checked = time.Now()
		_ = c.reload()
	}
	return c.cert, c.pool
}

// ServerConfig is the TLS configuration of a listener: it presents this
// process's certificate and requires a client certificate signed by the CA.
func (c *Creds) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := c.current()
			return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert},
				ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}, nil
		},
	}
}

// ClientConfig is the TLS configuration of a dialer: it presents this
// process's certificate and verifies the server's against the CA and the
// name or address dialled.
func (c *Creds) ClientConfig(serverName string) *tls.Config {
	_, pool := c.current()
	return &tls.Config{
		MinVersion: tls.VersionTLS12, ServerName: serverName, RootCAs: pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := c.current()
			return cert, nil
		},
	}
}

// ServerOption is the gRPC server option: TLS credentials, or none (the
// gRPC default, plaintext) when c is nil.
func (c *Creds) ServerOption() grpc.ServerOption {
	if c == nil {
		return grpc.EmptyServerOption{}
	}
	return grpc.Creds(credentials.NewTLS(c.ServerConfig()))
}

// DialOption is the gRPC dial option matching ServerOption.
func (c *Creds) DialOption() grpc.DialOption {
	if c == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(&dialCreds{c: c})
}

// dialCreds builds the client TLS configuration per handshake so a CA
// rotation reaches new connections.
type dialCreds struct {
	credentials.TransportCredentials
	c *Creds
}

func (d *dialCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	host, _, err := net.SplitHostPort(authority)
	if err != nil {
		host = authority
	}
	return credentials.NewTLS(d.c.ClientConfig(host)).ClientHandshake(ctx, authority, raw)
}

func (d *dialCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

func (d *dialCreds) Clone() credentials.TransportCredentials { return &dialCreds{c: d.c} }

func (d *dialCreds) OverrideServerName(string) error { return nil }

func (d *dialCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("peertls: dial credentials cannot serve")
}

// Listener wraps a plain listener in TLS (unchanged when c is nil).
func (c *Creds) Listener(ln net.Listener) net.Listener {
	if c == nil {
		return ln
	}
	return tls.NewListener(ln, c.ServerConfig())
}

// Dial connects to address over TLS (plain TCP when c is nil), completing
// the handshake within timeout.
func (c *Creds) Dial(address string, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if c == nil {
		return d.Dial("tcp", address)
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	conn, err := tls.DialWithDialer(d, "tcp", address, c.ClientConfig(host))
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// StreamLayer is a raft.StreamLayer over a listener wrapped by Listener,
// dialling with Dial: the Raft traffic of the masters' group.
type StreamLayer struct {
	net.Listener
	creds     *Creds
	advertise net.Addr
}

// NewStreamLayer serves Raft on ln (wrapped in TLS when c is not nil);
// advertise, when not nil, is the address given to peers.
func (c *Creds) NewStreamLayer(ln net.Listener, advertise net.Addr) *StreamLayer {
	return &StreamLayer{Listener: c.Listener(ln), creds: c, advertise: advertise}
}

// Dial implements raft.StreamLayer.
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.creds.Dial(string(address), timeout)
}

// Addr is the advertised address, else the listener's.
func (s *StreamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.Listener.Addr()
}

// DialContext connects to address over TLS (plain TCP when c is nil) within
// ctx, handshake included.
func (c *Creds) DialContext(ctx context.Context, address string) (net.Conn, error) {
	var d net.Dialer
	if c == nil {
		return d.DialContext(ctx, "tcp", address)
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	td := &tls.Dialer{NetDialer: &d, Config: c.ClientConfig(host)}
	return td.DialContext(ctx, "tcp", address)
}
