// Package logging routes the logs of hashicorp/raft (hclog) and
// hashicorp/memberlist (a standard *log.Logger) into log/slog, so that a node
// has one logger, one format and its node id on every line.
package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Discard returns a logger that drops everything: the default of every Config.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// HCLog adapts l to hclog.Logger for hashicorp/raft.
func HCLog(l *slog.Logger, name string) hclog.Logger {
	return &hcAdapter{l: l.With("component", name), name: name}
}

type hcAdapter struct {
	l       *slog.Logger
	name    string
	implied []any
}

func toSlog(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (a *hcAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level >= hclog.Warn && closedConn(args) {
		// raft reports every connection closed by a normal shutdown as an
		// error; it is not one.
		level = hclog.Debug
	}
	if level == hclog.Warn && msg == "heartbeat timeout reached, starting election" && noLastLeader(args) {
		// A node that never had a leader (every start) elects one this
		// way: routine, not a warning. With a last leader it stays WARN.
		level = hclog.Info
	}
	a.l.Log(context.Background(), toSlog(level), msg, a.args(args)...)
}

// noLastLeader reports whether raft's arguments name no last leader.
func noLastLeader(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == "last-leader-addr" {
			return fmt.Sprint(args[i+1]) == ""
		}
	}
	return false
}

// reserved are keys the handler or this package set on every line: an
// hclog argument of the same name (raft logs "node" for itself, "time" for
// durations) is renamed NAME_KEY ("raft_node"), or a JSON line would hold
// the key twice and readers would see raft's value instead of the node id.
var reserved = map[string]bool{
	slog.TimeKey: true, slog.LevelKey: true, slog.MessageKey: true, slog.SourceKey: true,
	"node": true, "component": true, "subsystem": true,
}

// args renames reserved keys and converts values (hcArgs).
func (a *hcAdapter) args(args []any) []any {
	out := hcArgs(args)
	prefix := a.name
	if i := strings.IndexByte(prefix, '.'); i >= 0 {
		prefix = prefix[:i]
	}
	if prefix == "" {
		prefix = "hclog"
	}
	for i := 0; i < len(out); i += 2 {
		if k, ok := out[i].(string); ok && reserved[k] {
			out[i] = prefix + "_" + k
		}
	}
	return out
}

// hcArgs converts the values of hclog's key/value pairs into what a slog
// handler prints as hclog would: hclog.Fmt formatted, hclog.Hex, Octal,
// Binary and Quote rendered, and other fmt.Stringers (raft passes *Raft,
// servers, addresses) by their String method. Without it a JSON handler
// marshals their exported fields instead ("servers":["%+v",[...]]).
func hcArgs(args []any) []any {
	out := make([]any, len(args))
	copy(out, args)
	for i := 1; i < len(out); i += 2 {
		out[i] = hcValue(out[i])
	}
	return out
}

func hcValue(v any) (out any) {
	switch x := v.(type) {
	case nil, string, bool, int, int64, uint64, float64, error, slog.Value, slog.LogValuer, json.Marshaler:
		return v
	case hclog.Format:
		if len(x) == 0 {
			return ""
		}
		if f, ok := x[0].(string); ok {
			return fmt.Sprintf(f, x[1:]...)
		}
		return fmt.Sprint(x...)
	case hclog.Hex:
		return fmt.Sprintf("0x%x", int(x))
	case hclog.Octal:
		return fmt.Sprintf("0%o", int(x))
	case hclog.Binary:
		return fmt.Sprintf("0b%b", int(x))
	case hclog.Quote:
		return strconv.Quote(string(x))
	case fmt.Stringer:
		defer func() {
			if recover() != nil { // a nil pointer with a value String method
				out = fmt.Sprintf("%#v", v)
			}
		}()
		return x.String()
	}
	return v
}

func closedConn(args []any) bool {
	for _, a := range args {
		if err, ok := a.(error); ok && strings.Contains(err.Error(), "use of closed network connection") {
			return true
		}
	}
	return false
}
func (a *hcAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hcAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hcAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hcAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hcAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }
func (a *hcAdapter) enabled(level hclog.Level) bool {
	return a.l.Enabled(context.Background(), toSlog(level))
}
func (a *hcAdapter) IsTrace() bool      { return a.enabled(hclog.Trace) }
func (a *hcAdapter) IsDebug() bool      { return a.enabled(hclog.Debug) }
func (a *hcAdapter) IsInfo() bool       { return a.enabled(hclog.Info) }
func (a *hcAdapter) IsWarn() bool       { return a.enabled(hclog.Warn) }
func (a *hcAdapter) IsError() bool      { return a.enabled(hclog.Error) }
func (a *hcAdapter) ImpliedArgs() []any { return a.implied }
func (a *hcAdapter) With(args ...any) hclog.Logger {
	return &hcAdapter{l: a.l.With(a.args(args)...), name: a.name, implied: append(append([]any(nil), a.implied...), args...)}
}
func (a *hcAdapter) Name() string { return a.name }
func (a *hcAdapter) Named(name string) hclog.Logger {
	n := name
	if a.name != "" {
		n = a.name + "." + name
	}
	return &hcAdapter{l: a.l.With("subsystem", name), name: n, implied: a.implied}
}
func (a *hcAdapter) ResetNamed(name string) hclog.Logger {
	return &hcAdapter{l: a.l, name: name, implied: a.implied}
}

// SetLevel is ignored: the slog handler decides what is printed.
func (a *hcAdapter) SetLevel(hclog.Level) {}
func (a *hcAdapter) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn} {
		if a.enabled(lv) {
			return lv
		}
	}
	return hclog.Error
}
func (a *hcAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return StdLogger(a.l)
}
func (a *hcAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &levelWriter{l: a.l}
}

// StdLogger returns a *log.Logger whose lines are parsed for hashicorp's
// "[LEVEL] " prefixes (as memberlist writes them) and logged at that level.
func StdLogger(l *slog.Logger) *log.Logger {
	return log.New(&levelWriter{l: l}, "", 0)
}

type levelWriter struct{ l *slog.Logger }

func (w *levelWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimRight(p, "\r\n"))
	level := slog.LevelInfo
	for prefix, lv := range map[string]slog.Level{
		"[TRACE]": slog.LevelDebug - 4, "[DEBUG]": slog.LevelDebug, "[INFO]": slog.LevelInfo,
		"[WARN]": slog.LevelWarn, "[ERR]": slog.LevelError, "[ERROR]": slog.LevelError,
	} {
		if i := strings.Index(msg, prefix); i >= 0 && i < 32 {
			level = lv
			msg = strings.TrimSpace(msg[i+len(prefix):])
			break
		}
	}
	w.l.Log(context.Background(), level, msg)
	return len(p), nil
}
