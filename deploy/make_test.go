package deploy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMakeRunPassesArgs: `make run ARGS='...'` hands the flags to dev.
func TestMakeRunPassesArgs(t *testing.T) {
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make not installed")
	}
	out, err := exec.Command(mk, "-n", "-C", "..", "run", "ARGS=--servers=5 --frontend-addr=127.0.0.1:20002").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "dev --data-dir ./data --servers=5 --frontend-addr=127.0.0.1:20002") {
		t.Errorf("make run does not pass ARGS to dev:\n%s", out)
	}
}

// TestComposeKeyNotInArgv: compose hands the account key to the front-end
// in its environment, never on its command line.
func TestComposeKeyNotInArgv(t *testing.T) {
	docs := loadYAML(t, "docker-compose.yml")
	services := mapAt(docs[0], "services")
	fe := mapAt(services, "frontend")
	for _, a := range stringList(t, get(fe, "command"), "frontend command") {
		if strings.HasPrefix(a, "--account-key=") {
			t.Errorf("command item %q puts the key on the command line", a)
		}
	}
	if str(fe, "environment", "TABLESTORE_ACCOUNT_KEY") == "" {
		t.Error("frontend environment lacks TABLESTORE_ACCOUNT_KEY")
	}
}
