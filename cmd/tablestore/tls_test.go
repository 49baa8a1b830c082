package main

import (
	"os/exec"
	"strings"
	"testing"

	"tablestore/internal/peertls"
)

// TestMultiProcessTLS runs 3 masters, 3 partition servers and a front-end
// with mutual TLS between them (gRPC and both kinds of Raft traffic) and
// does an SDK round trip; ctl with the certificate lists the masters, ctl
// without it is refused.
func TestMultiProcessTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	tlsCfg, err := peertls.WriteTestPKI(t.TempDir(), "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	tlsArgs := []string{"--tls-cert", tlsCfg.CertFile, "--tls-key", tlsCfg.KeyFile, "--tls-ca", tlsCfg.CAFile}
	c := startProcessCluster(t, "mtls", tlsArgs...)
	ctl := func(extra ...string) (string, error) {
		args := append([]string{"ctl", "--master", strings.Join(c.masters, ","), "--timeout", "5s"}, extra...)
		out, err := exec.Command(c.bin, append(args, "master", "list")...).CombinedOutput()
		return string(out), err
	}
	if out, err := ctl(tlsArgs...); err != nil || strings.Count(out, "127.0.0.1:") != 3 {
		t.Fatalf("ctl with the certificate: %v\n%s", err, out)
	}
	if out, err := ctl(); err == nil {
		t.Fatalf("ctl without a certificate was answered:\n%s", out)
	}
}
