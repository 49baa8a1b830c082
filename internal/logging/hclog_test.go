package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestHCLogFormat: hclog.Fmt values (raft's "initial configuration" and
// snapshot progress lines) are rendered, not printed as their parts.
func TestHCLogFormat(t *testing.T) {
	var buf bytes.Buffer
	l := HCLog(slog.New(slog.NewTextHandler(&buf, nil)), "raft")
	args := []interface{}{"servers", hclog.Fmt("%+v", []struct{ ID string }{{"ps1"}}), "percent-complete", hclog.Fmt("%0.2f%%", 100.0), "index", 3}
	l.Info("initial configuration", args...)
	out := buf.String()
	for _, want := range []string{`servers=[{ID:ps1}]`, `percent-complete=100.00%`, `index=3`} {
		if !strings.Contains(out, want) {
			t.Errorf("log line %q lacks %s", out, want)
		}
	}
	if strings.Contains(out, "%+v") {
		t.Errorf("log line %q has the format verb", out)
	}
	if _, ok := args[1].(hclog.Format); !ok {
		t.Error("the caller's args were changed")
	}
}
