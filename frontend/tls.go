package frontend

import (
	"crypto/tls"
	"fmt"
	"os"

	"software.sslmate.com/src/go-pkcs12"
)

// CheckTLS reports whether the certificate and key the front-end would
// serve HTTPS with can be loaded, so that a command starting several
// roles (dev) refuses a bad --cert before it starts any.
func (c *Config) CheckTLS() error {
	_, err := c.loadTLS()
	return err
}

// loadTLS builds the server's TLS configuration from Config.CertFile:
// a PEM certificate chain with KeyFile, or a PKCS#12 bundle (.pfx, .p12)
// opened with CertPassword, as Azurite's --cert/--key/--pwd. nil when HTTPS
// is off. Errors name the file, for a one-line start-up message.
func (c *Config) loadTLS() (*tls.Config, error) {
	if c.CertFile == "" {
		return nil, nil
	}
	var cert tls.Certificate
	if isPFX(c.CertFile) {
		data, err := os.ReadFile(c.CertFile)
		if err != nil {
			return nil, fmt.Errorf("frontend: --cert %s: %w", c.CertFile, err)
		}
		key, leaf, chain, err := pkcs12.DecodeChain(data, c.CertPassword)
		if err != nil {
			return nil, fmt.Errorf("frontend: --cert %s: cannot open the PKCS#12 bundle with --pwd: %w", c.CertFile, err)
		}
		cert.Certificate = [][]byte{leaf.Raw}
		for _, ca := range chain {
			cert.Certificate = append(cert.Certificate, ca.Raw)
		}
		cert.PrivateKey, cert.Leaf = key, leaf
	} else {
		var err error
		if cert, err = tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
			return nil, fmt.Errorf("frontend: --cert %s / --key %s: %w", c.CertFile, c.KeyFile, err)
		}
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
