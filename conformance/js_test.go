package conformance

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"tablestore/frontend"
	"tablestore/frontend/auth"
)

// TestJSSDK runs the node test project in conformance/js (the official
// @azure/data-tables SDK, pinned by its package-lock.json) against the
// shared cluster, an extra front-end with HTTPS and --oauth basic, and the
// multi-account cluster. It needs node and npm; without node it is skipped.
// node_modules comes from `npm ci` (.ci/run does it; the test does it too
// when the directory is missing).
func TestJSSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the JavaScript SDK tests (conformance/js) need Node.js 18+ and npm")
	}
	dir, err := filepath.Abs("js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@azure", "data-tables")); err != nil {
		ci := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		ci.Dir = dir
		if out, err := ci.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in conformance/js: %v\n%s", err, out)
		}
	}

	cert := newTestCert(t)
	https := startFrontend(t, func(c *frontend.Config) {
		c.CertFile, c.KeyFile, c.OAuth = cert.certPEM, cert.keyPEM, "basic"
	})
	_, multiFE := multiCluster(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "tablestore.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"TS_ENDPOINT="+endpoint,
		"TS_ACCOUNT="+auth.DevAccountName,
		"TS_KEY="+auth.DevAccountKey,
		"TS_HTTPS_ENDPOINT=https://"+https.Addr+"/"+auth.DevAccountName,
		"TS_TOKEN="+jwt(t, tokenClaims("https://storage.azure.com", time.Now().Add(time.Hour))),
		"NODE_EXTRA_CA_CERTS="+cert.caFile(),
		"TS_MULTI_ENDPOINT=http://"+multiFE.Addr,
		"TS_MULTI_ACCOUNTS="+multiAccounts,
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
