// Package cluster is one Manager member's life in its cluster (Member): its
// store and the store's replacement by a recovery (ForceStandalone,
// LeaveQuorum, a stale generation), the primary terms it runs — each
// starting the rest of the daemon's work through TermWork —, joining,
// promotion and generations, the write path (Apply: on a follower, passed
// to the primary) and linearizable reads, the Members service the members
// call each other with, and the Manager service's membership calls (RPCs).
// Beside it: the members as configured (Node), the member's own durable
// log of cluster events (Events), and the members' HTTP client.
package cluster

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/clock"
)

// EventsFile is the member's own event log in its data directory:
// one JSON object per line, appended and synced as each event happens. It is
// this member's record (not replicated): role changes and why, joins,
// retirements, recoveries, takeovers settling.
const EventsFile = "cluster-events.jsonl"

// eventsKeep bounds the log: when it holds twice as many, the oldest
// are dropped (the file is rewritten).
const eventsKeep = 10_000

type eventLine struct {
	At         time.Time `json:"at"`
	Kind       string    `json:"kind"`
	Detail     string    `json:"detail"`
	Term       uint64    `json:"term,omitempty"`
	Generation uint64    `json:"generation,omitempty"`
}

// Events is the durable event log. Safe for concurrent use.
type Events struct {
	path  string
	clock clock.Clock
	log   *slog.Logger

	mu     sync.Mutex
	events []eventLine
	f      *os.File
}

// OpenEvents reads the log in dir (a damaged line is skipped: the
// log is a record for operators, not state). It never fails: without a
// writable file the events are kept in memory and logged.
func OpenEvents(dir string, clk clock.Clock, log *slog.Logger) *Events {
	e := &Events{path: filepath.Join(dir, EventsFile), clock: clk, log: log}
	if f, err := os.Open(e.path); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l eventLine
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Kind != "" {
				e.events = append(e.events, l)
			}
		}
		_ = f.Close()
	}
	if len(e.events) > eventsKeep {
		e.events = slices.Clone(e.events[len(e.events)-eventsKeep:])
		e.rewrite()
	}
	f, err := os.OpenFile(e.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		log.Warn("the cluster event log cannot be written; events are kept in memory only", "path", e.path, "err", err)
	} else {
		e.f = f
	}
	return e
}

// rewrite replaces the file with the events held (c.mu held or not yet
// shared).
func (e *Events) rewrite() {
	_ = atomicfile.Write(e.path, 0o600, func(f io.Writer) error {
		w := bufio.NewWriter(f)
		enc := json.NewEncoder(w)
		for _, l := range e.events {
			if err := enc.Encode(l); err != nil {
				return err
			}
		}
		return w.Flush()
	})
}

// Record appends an event and logs it.
func (e *Events) Record(kind, detail string, term, generation uint64) {
	l := eventLine{At: e.clock.Now().UTC(), Kind: kind, Detail: detail, Term: term, Generation: generation}
	e.log.Info("cluster event", "kind", kind, "detail", detail, "term", term, "generation", generation)
	b, _ := json.Marshal(l)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, l)
	if e.f != nil {
		if _, err := e.f.Write(append(b, '\n')); err == nil {
			_ = e.f.Sync()
		}
	}
	if len(e.events) >= 2*eventsKeep {
		e.events = slices.Clone(e.events[len(e.events)-eventsKeep:])
		if e.f != nil {
			_ = e.f.Close()
			e.rewrite()
			e.f, _ = os.OpenFile(e.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		}
	}
}

// Query returns up to limit events, newest first, of the given kinds (all
// when empty) at or after since (zero: any).
func (e *Events) Query(limit int, kinds []string, since time.Time) []*managerv1.ClusterEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*managerv1.ClusterEvent
	for i := len(e.events) - 1; i >= 0 && len(out) < limit; i-- {
		l := e.events[i]
		if !since.IsZero() && l.At.Before(since) {
			break
		}
		if len(kinds) > 0 && !slices.Contains(kinds, l.Kind) {
			continue
		}
		out = append(out, &managerv1.ClusterEvent{At: timestamppb.New(l.At), Kind: l.Kind, Detail: l.Detail, Term: l.Term, Generation: l.Generation})
	}
	return out
}

// Close closes the file.
func (e *Events) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f != nil {
		_ = e.f.Close()
		e.f = nil
	}
}
