package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// Raft's messages reach slog as records with their key/value arguments as
// fields, at hclog's level, named by component.
func TestHCLogBridgeFields(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := hclogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "raft")
	l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "127.0.0.1:1", "last-leader-id", "m1", "err", errors.New("boom"))
	l.Named("net").Info("entering follower state", "follower", hclog.Fmt("%s-%d", "m", 2))
	l.Debug("dropped: below the level")
	var recs []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("not JSON: %s", line)
		}
		recs = append(recs, m)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2: %s", len(recs), buf.String())
	}
	if r := recs[0]; r["level"] != "WARN" || r["msg"] != "heartbeat timeout reached, starting election" || r["last-leader-id"] != "m1" || r["err"] != "boom" || r["component"] != "raft" {
		t.Errorf("first record: %v", r)
	}
	if r := recs[1]; r["component"] != "raft.net" || r["follower"] != "m-2" {
		t.Errorf("second record: %v", r)
	}
}
