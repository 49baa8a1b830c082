package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
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
	dir := t.TempDir()
	bin := binary(t)
	tlsCfg, err := peertls.WriteTestPKI(dir, "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	tlsArgs := []string{"--tls-cert", tlsCfg.CertFile, "--tls-key", tlsCfg.KeyFile, "--tls-ca", tlsCfg.CAFile}
	ps := newProcSet(t, bin)
	p := freePorts(t, 13)
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(p[i]) }
	var peers, masters []string
	for i := 0; i < 3; i++ {
		peers = append(peers, fmt.Sprintf("m%d=%s", i+1, addr(3+i)))
		masters = append(masters, addr(i))
	}
	for i := 0; i < 3; i++ {
		ps.start(fmt.Sprintf("master%d", i+1), append([]string{"master",
			"--id", fmt.Sprintf("m%d", i+1), "--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i+1)),
			"--grpc-addr", addr(i), "--raft-addr", addr(3+i), "--peers", strings.Join(peers, ","), "--log-level", "warn"}, tlsArgs...)...)
	}
	for i := 0; i < 3; i++ {
		ps.start(fmt.Sprintf("ps%d", i+1), append([]string{"partitionserver",
			"--id", fmt.Sprintf("ps%d", i+1), "--data-dir", filepath.Join(dir, fmt.Sprintf("ps%d", i+1)),
			"--grpc-addr", addr(6+i), "--raft-addr", addr(9+i), "--masters", strings.Join(masters, ","), "--log-level", "warn"}, tlsArgs...)...)
	}
	ps.start("frontend", append([]string{"frontend", "--http-addr", addr(12), "--masters", strings.Join(masters, ","), "--log-level", "warn"}, tlsArgs...)...)
	sdkRoundTrip(t, addr(12), "mtls")

	ctl := func(extra ...string) (string, error) {
		args := append([]string{"ctl", "--master", strings.Join(masters, ","), "--timeout", "5s"}, extra...)
		out, err := exec.Command(bin, append(args, "master", "list")...).CombinedOutput()
		return string(out), err
	}
	if out, err := ctl(tlsArgs...); err != nil || strings.Count(out, "127.0.0.1:") != 3 {
		t.Fatalf("ctl with the certificate: %v\n%s", err, out)
	}
	if out, err := ctl(); err == nil {
		t.Fatalf("ctl without a certificate was answered:\n%s", out)
	}
}
