package differential

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/frontend/auth"
	"tablestore/internal/logging"
)

// enableVar: "1" runs the tests against whatever azurite-table is on the
// PATH (make diff-azurite sets it), "0" skips them; unset, they run when
// the azurite-table on the PATH is pinnedAzurite (as .ci/run installs it,
// so that make test compares the two), and skip otherwise.
const enableVar = "TABLESTORE_DIFF_AZURITE"

// pinnedAzurite is the version testdata/known-differences.txt was
// classified against: another version's answers may differ in classes the
// file does not list, which says nothing about tablestore.
const pinnedAzurite = "3.37.0"

// The two servers under comparison, started once by TestMain.
var (
	tsSvc, azSvc   *aztables.ServiceClient
	tsURL, azURL   string // endpoints, for the reproducers
	azuriteVersion string
	skipReason     string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	enable := os.Getenv(enableVar)
	if enable == "0" {
		skipReason = enableVar + "=0"
		return m.Run()
	}
	bin, err := exec.LookPath("azurite-table")
	if err != nil {
		skipReason = "azurite-table is not on the PATH (npm install -g azurite@" + pinnedAzurite + ")"
		return m.Run()
	}
	if v := azuriteVersionOf(bin); enable != "1" && v != pinnedAzurite {
		skipReason = fmt.Sprintf("azurite-table on the PATH is %q, not %s (set %s=1 to compare anyway)", v, pinnedAzurite, enableVar)
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "tablestore-differential-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	stop, err := startAzurite(bin, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting azurite-table:", err)
		return 1
	}
	defer stop()
	tc, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: filepath.Join(dir, "cluster"), Logger: logging.FromEnv("")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the cluster:", err)
		return 1
	}
	defer tc.Close()
	tsURL = tc.Endpoint(0)
	if tsSvc, err = aztables.NewServiceClientFromConnectionString(tc.ConnectionString(0), clientOptions()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// startAzurite runs azurite-table in memory on a free port and waits until
// it answers; stop ends that process (and only it).
func startAzurite(bin, dir string) (stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	azuriteVersion = azuriteVersionOf(bin)
	// --location cannot go with --inMemoryPersistence: the scratch
	// directory is the working directory instead, for whatever else
	// Azurite writes.
	args := []string{"--inMemoryPersistence", "--tableHost", "127.0.0.1",
		"--tablePort", strconv.Itoa(port), "--skipApiVersionCheck", "--silent"}
	if help, _ := exec.Command(bin, "--help").CombinedOutput(); strings.Contains(string(help), "--disableTelemetry") {
		args = append(args, "--disableTelemetry")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop = func() {
		cmd.Process.Kill()
		<-exited
	}
	azURL = "http://127.0.0.1:" + strconv.Itoa(port) + "/" + auth.DevAccountName
	conn := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=%s;", auth.DevAccountName, auth.DevAccountKey, azURL)
	if azSvc, err = aztables.NewServiceClientFromConnectionString(conn, clientOptions()); err != nil {
		stop()
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			return nil, fmt.Errorf("azurite-table exited: %s", logs.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		pager := azSvc.NewListTablesPager(nil)
		_, err := pager.NextPage(ctx)
		cancel()
		if err == nil {
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("not ready after 60 s: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// azuriteVersionOf is what bin --version prints, "" if it fails.
func azuriteVersionOf(bin string) string {
	v, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(v))
}

// clientOptions: one quick retry only, so a server error shows up as the
// answer instead of being retried for seconds.
func clientOptions() *aztables.ClientOptions {
	return &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: http.DefaultClient,
		Retry:     policy.RetryOptions{MaxRetries: 1, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond},
	}}
}

// requireServers skips the test unless both servers run.
func requireServers(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
