package logging

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
)

// New returns a text slog logger writing to w at the named level
// ("debug", "info", "warn", "error").
func New(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("logging: bad level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// Discard returns a logger that drops everything; tests use it to keep
// output readable.
func Discard() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 10}))
}

// FromEnv returns a logger on stderr whose level comes from
// TABLESTORE_LOG_LEVEL (default fallback); tests use it so a developer can turn
// logs on without code changes.
func FromEnv(fallback string) *slog.Logger {
	lvl := os.Getenv("TABLESTORE_LOG_LEVEL")
	if lvl == "" {
		if fallback == "" {
			return Discard()
		}
		lvl = fallback
	}
	l, err := New(os.Stderr, lvl)
	if err != nil {
		return Discard()
	}
	return l
}

// stdWriter adapts a slog logger to an io.Writer for log.Logger users
// (gRPC's and raft's standard loggers).
type stdWriter struct {
	l     *slog.Logger
	level slog.Level
}

func (w stdWriter) Write(p []byte) (int, error) {
	w.l.Log(context.Background(), w.level, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// StdLogger returns a *log.Logger that writes each line to l at level.
func StdLogger(l *slog.Logger, level slog.Level) *log.Logger {
	return log.New(stdWriter{l: l, level: level}, "", 0)
}
