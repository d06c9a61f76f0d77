package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// hclogger is an hclog.Logger for raft and its stores that logs through
// slog: a message and its key/value arguments become one slog record with
// those fields (component=name), not a formatted line, so a JSON handler
// shows raft's own facts as fields.
func hclogger(l *slog.Logger, name string) hclog.Logger {
	lv := &atomic.Int32{}
	lv.Store(int32(hclog.Info))
	return &slogHCLog{base: l, l: l.With("component", name), name: name, level: lv}
}

// slogHCLog adapts slog to hclog.Logger. Trace logs at slog's debug level
// minus 4; hclog's level (default info) filters before slog does.
type slogHCLog struct {
	// base is the logger without component or implied arguments; l adds
	// them.
	base    *slog.Logger
	l       *slog.Logger
	name    string
	implied []any
	level   *atomic.Int32
}

var _ hclog.Logger = (*slogHCLog)(nil)

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// fields turns hclog's alternating key/value arguments into slog
// attributes (an odd last value is kept under "extra"; values that are
// hclog.Format render with it).
func fields(args []any) []any {
	out := make([]any, 0, len(args)+1)
	for i := 0; i < len(args); i += 2 {
		if i+1 >= len(args) {
			out = append(out, slog.Any("extra", args[i]))
			break
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		v := args[i+1]
		switch x := v.(type) {
		case hclog.Format:
			if len(x) > 0 {
				if f, ok := x[0].(string); ok {
					v = fmt.Sprintf(f, x[1:]...)
				}
			}
		case error:
			v = x.Error()
		case fmt.Stringer:
			v = x.String()
		}
		out = append(out, slog.Any(key, v))
	}
	return out
}

func (h *slogHCLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level < hclog.Level(h.level.Load()) {
		return
	}
	h.l.Log(context.Background(), slogLevel(level), msg, fields(args)...)
}

func (h *slogHCLog) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *slogHCLog) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *slogHCLog) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *slogHCLog) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *slogHCLog) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *slogHCLog) enabled(level hclog.Level) bool { return level >= hclog.Level(h.level.Load()) }
func (h *slogHCLog) IsTrace() bool                  { return h.enabled(hclog.Trace) }
func (h *slogHCLog) IsDebug() bool                  { return h.enabled(hclog.Debug) }
func (h *slogHCLog) IsInfo() bool                   { return h.enabled(hclog.Info) }
func (h *slogHCLog) IsWarn() bool                   { return h.enabled(hclog.Warn) }
func (h *slogHCLog) IsError() bool                  { return h.enabled(hclog.Error) }

func (h *slogHCLog) ImpliedArgs() []any { return h.implied }

func (h *slogHCLog) With(args ...any) hclog.Logger {
	return &slogHCLog{base: h.base, l: h.l.With(fields(args)...), name: h.name, implied: append(append([]any(nil), h.implied...), args...), level: h.level}
}

func (h *slogHCLog) Name() string { return h.name }

func (h *slogHCLog) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}

func (h *slogHCLog) ResetNamed(name string) hclog.Logger {
	return &slogHCLog{base: h.base, l: h.base.With(append([]any{"component", name}, fields(h.implied)...)...), name: name, implied: h.implied, level: h.level}
}

func (h *slogHCLog) SetLevel(level hclog.Level) { h.level.Store(int32(level)) }
func (h *slogHCLog) GetLevel() hclog.Level      { return hclog.Level(h.level.Load()) }

func (h *slogHCLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *slogHCLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &slogWriter{l: h.l}
}

// slogWriter logs each line written to it (a standard library logger's
// output: raft's network layer) as one slog record, its level read from an
// "[ERROR]"/"[WARN]"/"[DEBUG]" marker.
type slogWriter struct{ l *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	switch {
	case bytes.Contains(line, []byte("[ERROR]")), bytes.Contains(line, []byte("[ERR]")):
		level = slog.LevelError
	case bytes.Contains(line, []byte("[WARN]")):
		level = slog.LevelWarn
	case bytes.Contains(line, []byte("[DEBUG]")), bytes.Contains(line, []byte("[TRACE]")):
		level = slog.LevelDebug
	}
	if i := bytes.Index(line, []byte("]  ")); i >= 0 {
		line = line[i+3:]
	} else if i := bytes.Index(line, []byte("] ")); i >= 0 && i < 12 {
		line = line[i+2:]
	}
	w.l.Log(context.Background(), level, string(line))
	return len(p), nil
}
