package logging

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
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

// TestHCLogRoutineErrors: raft's "failed to get log" before it sends a
// snapshot to a follower behind the log's start is Debug; the same line
// with another error, and other Error lines, stay Error.
func TestHCLogRoutineErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  string
		args []interface{}
		want string
	}{
		{"compacted, snapshot follows", "failed to get log", []interface{}{"index", 7, "error", raft.ErrLogNotFound}, "DEBUG"},
		{"compacted, wrapped", "failed to get log", []interface{}{"index", 7, "error", fmt.Errorf("raftlog: %w", raft.ErrLogNotFound)}, "DEBUG"},
		{"a read that failed", "failed to get log", []interface{}{"index", 7, "error", errors.New("disk")}, "ERROR"},
		{"another error line", "failed to appendEntries to", []interface{}{"error", raft.ErrLogNotFound}, "ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := HCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "raft")
			l.Error(tc.msg, tc.args...)
			if !strings.Contains(buf.String(), "level="+tc.want) {
				t.Errorf("logged %q, want level %s", buf.String(), tc.want)
			}
		})
	}
}
