package logging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// HCLog returns an hclog.Logger that writes into l. hashicorp/raft logs
// through hclog; bridging keeps one format and one level setting per process.
func HCLog(l *slog.Logger, name string) hclog.Logger {
	return &hclogBridge{l: l.With("component", name), name: name}
}

type hclogBridge struct {
	l       *slog.Logger
	name    string
	implied []interface{}
}

func toSlog(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Info, hclog.NoLevel, hclog.DefaultLevel:
		return slog.LevelInfo
	case hclog.Warn:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (b *hclogBridge) Log(level hclog.Level, msg string, args ...interface{}) {
	lvl := toSlog(level)
	if lvl == slog.LevelError && routine(msg, args) {
		lvl = slog.LevelDebug
	}
	if !b.l.Enabled(context.Background(), lvl) {
		return
	}
	b.l.Log(context.Background(), lvl, msg, formatArgs(args)...)
}

// routine reports whether raft's Error line msg is one raft handles as
// a matter of course: "failed to get log" with ErrLogNotFound is a
// follower whose next entry the log compacted away, which replicateTo
// answers by sending a snapshot (every new replica starts so). Logged at
// Error, it read as a fault on every move.
func routine(msg string, args []interface{}) bool {
	if msg != "failed to get log" {
		return false
	}
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "error" {
			err, _ := args[i+1].(error)
			return errors.Is(err, raft.ErrLogNotFound)
		}
	}
	return false
}

// formatArgs renders the hclog.Fmt values among args (raft logs its
// configurations and snapshot progress so), which slog would otherwise print
// as their parts: servers="[%+v [{Suffrage:Voter ...}]]".
func formatArgs(args []interface{}) []interface{} {
	var out []interface{}
	for i, a := range args {
		f, ok := a.(hclog.Format)
		if !ok || len(f) == 0 {
			continue
		}
		format, ok := f[0].(string)
		if !ok {
			continue
		}
		if out == nil {
			out = append([]interface{}{}, args...)
		}
		out[i] = fmt.Sprintf(format, f[1:]...)
	}
	if out == nil {
		return args
	}
	return out
}

func (b *hclogBridge) Trace(msg string, args ...interface{}) { b.Log(hclog.Trace, msg, args...) }
func (b *hclogBridge) Debug(msg string, args ...interface{}) { b.Log(hclog.Debug, msg, args...) }
func (b *hclogBridge) Info(msg string, args ...interface{})  { b.Log(hclog.Info, msg, args...) }
func (b *hclogBridge) Warn(msg string, args ...interface{})  { b.Log(hclog.Warn, msg, args...) }
func (b *hclogBridge) Error(msg string, args ...interface{}) { b.Log(hclog.Error, msg, args...) }

func (b *hclogBridge) enabled(l hclog.Level) bool {
	return b.l.Enabled(context.Background(), toSlog(l))
}

func (b *hclogBridge) IsTrace() bool { return b.enabled(hclog.Trace) }
func (b *hclogBridge) IsDebug() bool { return b.enabled(hclog.Debug) }
func (b *hclogBridge) IsInfo() bool  { return b.enabled(hclog.Info) }
func (b *hclogBridge) IsWarn() bool  { return b.enabled(hclog.Warn) }
func (b *hclogBridge) IsError() bool { return b.enabled(hclog.Error) }

func (b *hclogBridge) ImpliedArgs() []interface{} { return b.implied }

func (b *hclogBridge) With(args ...interface{}) hclog.Logger {
	implied := append(append([]interface{}{}, b.implied...), args...)
	return &hclogBridge{l: b.l.With(args...), name: b.name, implied: implied}
}

func (b *hclogBridge) Name() string { return b.name }

func (b *hclogBridge) Named(name string) hclog.Logger {
	n := name
	if b.name != "" {
		n = b.name + "." + name
	}
	return &hclogBridge{l: b.l.With("subcomponent", name), name: n, implied: b.implied}
}

func (b *hclogBridge) ResetNamed(name string) hclog.Logger {
	return &hclogBridge{l: b.l.With("subcomponent", name), name: name, implied: b.implied}
}

// SetLevel is a no-op: the slog handler owns the level.
func (b *hclogBridge) SetLevel(hclog.Level) {}

func (b *hclogBridge) GetLevel() hclog.Level {
	switch {
	case b.IsTrace():
		return hclog.Trace
	case b.IsDebug():
		return hclog.Debug
	case b.IsInfo():
		return hclog.Info
	case b.IsWarn():
		return hclog.Warn
	default:
		return hclog.Error
	}
}

func (b *hclogBridge) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return StdLogger(b.l, slog.LevelInfo)
}

func (b *hclogBridge) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return stdWriter{l: b.l, level: slog.LevelInfo}
}
