package store

import (
	"bytes"
	"context"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hclogger returns an hclog.Logger (what raft and raft-wal take) that writes
// through slog, so the Manager has one log stream.
func hclogger(l *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   name,
		Level:  hclog.Info,
		Output: &slogWriter{l: l.With("component", name)},
	})
}

type slogWriter struct{ l *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	switch {
	case bytes.Contains(line, []byte("[ERROR]")):
		level = slog.LevelError
	case bytes.Contains(line, []byte("[WARN]")):
		level = slog.LevelWarn
	case bytes.Contains(line, []byte("[DEBUG]")), bytes.Contains(line, []byte("[TRACE]")):
		level = slog.LevelDebug
	}
	// Drop hclog's own timestamp and level prefix: "2006-01-02T… [INFO]  name: msg".
	if i := bytes.Index(line, []byte("]  ")); i >= 0 {
		line = line[i+3:]
	}
	w.l.Log(context.Background(), level, string(line))
	return len(p), nil
}
