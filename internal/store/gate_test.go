package store

import (
	"context"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// fired is a limit that has fired.
func fired() <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

func TestCommitGate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// steps run in order: 'w' wrote(i), 'r' reached(i), 'd' dropped the
		// log's tail from i, 'c' compacted its head up to i.
		steps []struct {
			op byte
			i  uint64
		}
		open bool
	}{
		{name: "nothing written", open: true},
		{name: "written, not reached", steps: steps('w', 5), open: false},
		{name: "reached the batch", steps: steps('w', 5, 'r', 5), open: true},
		{name: "reached past it (a later barrier or configuration)", steps: steps('w', 5, 'r', 7), open: true},
		{name: "reached only an earlier batch", steps: steps('w', 5, 'w', 9, 'r', 5), open: false},
		{name: "a snapshot restored past everything", steps: steps('w', 9, 'r', 100), open: true},
		{name: "an older index written again (a new leader's log) stays open", steps: steps('w', 9, 'r', 9, 'w', 8), open: true},
		{name: "written again after reaching", steps: steps('w', 5, 'r', 5, 'w', 6), open: false},
		{name: "the tail written dropped (a new leader's log)", steps: steps('w', 9, 'r', 5, 'd', 7), open: false},
		{name: "the tail dropped down to what the FSM has", steps: steps('w', 9, 'r', 5, 'd', 6), open: true},
		{name: "the head compacted", steps: steps('w', 9, 'r', 5, 'c', 4), open: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := &commitGate{}
			for _, s := range tc.steps {
				switch s.op {
				case 'w':
					g.wrote(s.i)
				case 'r':
					g.reached(s.i)
				case 'd': // the tail from s.i on
					g.dropped(s.i, 1<<20)
				case 'c': // the head up to s.i
					g.dropped(1, s.i)
				}
			}
			if got := g.wait(nil, fired); got != tc.open {
				t.Fatalf("wait = %v, want %v (written %d, started %d)", got, tc.open, g.written, g.started)
			}
		})
	}
}

func steps(v ...any) []struct {
	op byte
	i  uint64
} {
	var out []struct {
		op byte
		i  uint64
	}
	for k := 0; k < len(v); k += 2 {
		out = append(out, struct {
			op byte
			i  uint64
		}{byte(v[k].(rune)), uint64(v[k+1].(int))})
	}
	return out
}

// A waiter is released by the FSM reaching the batch, by stop, or by its
// limit — never left waiting.
func TestCommitGateReleases(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"reached", "stop", "limit"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			g := &commitGate{}
			g.wrote(3)
			stop := make(chan struct{})
			limit := make(chan time.Time)
			got := make(chan bool)
			go func() { got <- g.wait(stop, func() <-chan time.Time { return limit }) }()
			switch how {
			case "reached":
				g.reached(3)
			case "stop":
				close(stop)
			case "limit":
				limit <- time.Time{}
			}
			if open := <-got; open != (how == "reached") {
				t.Fatalf("wait = %v after %s", open, how)
			}
		})
	}
}

// A proposal whose caller gave up before the proposer took it is never
// proposed: the caller hears DEADLINE_EXCEEDED and nothing is applied.
func TestProposalDroppedWhenCallerGaveUp(t *testing.T) {
	t.Parallel()
	s := openStore(t, t.TempDir())
	defer s.Close()
	// Shut the gate for good (a command written that the FSM never gets),
	// with a hold long enough that the caller gives up first.
	s.gate.wrote(1 << 40)
	s.cfg.ProposalHold = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := s.Apply(ctx, createJob("dropped"))
	if !apierr.Is(err, apierr.DeadlineExceeded) {
		t.Fatalf("Apply = %v, want DEADLINE_EXCEEDED", err)
	}
	// Open the gate: the proposer finds the caller gone and drops it.
	s.gate.reached(1 << 40)
	if _, err := s.Apply(context.Background(), createJob("after")); err != nil {
		t.Fatalf("Apply after the gate opened: %v", err)
	}
	r := s.State().Snapshot()
	if r.Job(nil, "after") == nil {
		t.Fatal("the write after the gate opened is missing")
	}
	if j := r.Job(nil, "dropped"); j != nil {
		t.Fatalf("the write whose caller gave up before it was proposed was applied: %v", j)
	}
}

// Close releases proposals held at the gate: their callers hear
// UNAVAILABLE, and Close returns.
func TestCloseReleasesHeldProposals(t *testing.T) {
	t.Parallel()
	s := openStore(t, t.TempDir())
	s.gate.wrote(1 << 40)
	s.cfg.ProposalHold = time.Hour
	errc := make(chan error, 1)
	go func() {
		_, err := s.Apply(context.Background(), createJob("held"))
		errc <- err
	}()
	// Wait until the proposer holds it at the gate.
	for !s.gate.holding.Load() {
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !apierr.Is(err, apierr.Unavailable) {
		t.Fatalf("Apply = %v, want UNAVAILABLE", err)
	}
}
