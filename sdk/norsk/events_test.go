package norsk_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

// deleted is a distinguishable live event: a job_deleted naming id.
func deleted(id string) *managerv1.Event {
	return &managerv1.Event{Kind: &managerv1.Event_JobDeleted{JobDeleted: &managerv1.JobDeleted{JobId: id}}}
}

// label names an event for comparisons: its kind and subject.
func label(ev *norsk.Event) string {
	switch k := ev.GetKind().(type) {
	case *managerv1.Event_JobDeleted:
		return k.JobDeleted.GetJobId()
	case *managerv1.Event_JobSnapshot:
		return "snap:" + k.JobSnapshot.GetJob().GetJobId()
	case *managerv1.Event_NodeSnapshot:
		return "snap:" + k.NodeSnapshot.GetNodeId()
	case *managerv1.Event_InitialDataComplete:
		return fmt.Sprintf("complete(resync=%v)", k.InitialDataComplete.GetResync())
	case *managerv1.Event_JobCreated:
		return "created:" + k.JobCreated.GetJob().GetJob().GetJobId()
	case *managerv1.Event_NodeOnline:
		return "online:" + k.NodeOnline.GetNode().GetNodeId()
	}
	return fmt.Sprintf("%T", ev.GetKind())
}

// next reads one event or fails the test.
func next(t *testing.T, s *norsk.EventStream) *norsk.Event {
	t.Helper()
	var timedOut atomic.Bool
	timer := time.AfterFunc(10*time.Second, func() { timedOut.Store(true); s.Close() })
	defer timer.Stop()
	if !s.Next() {
		if timedOut.Load() {
			t.Fatalf("no event within 10s")
		}
		t.Fatalf("stream ended: %v", s.Err())
	}
	return s.Event()
}

// expect reads len(want) events and compares their labels.
func expect(t *testing.T, s *norsk.EventStream, want ...string) {
	t.Helper()
	for i, w := range want {
		if got := label(next(t, s)); got != w {
			t.Fatalf("event %d = %s, want %s", i, got, w)
		}
	}
}

func TestEventStreamSnapshotThenLive(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	srv.AddNode(&managerv1.Node{NodeId: "n1"})
	if _, err := m.CreateJob(t.Context(), testJob("a")); err != nil {
		t.Fatal(err)
	}
	s := m.EventStream(t.Context(), norsk.EventStreamSettings{})
	defer s.Close()
	expect(t, s, "snap:a", "snap:n1", "complete(resync=false)")
	if idc := s.Event().GetInitialDataComplete(); idc.GetIndex() != srv.Index() {
		t.Errorf("initial_data_complete.index = %d, want %d", idc.GetIndex(), srv.Index())
	}
	if _, err := m.CreateJob(t.Context(), testJob("b")); err != nil {
		t.Fatal(err)
	}
	expect(t, s, "created:b")
	if s.Event().GetIndex() != srv.Index() {
		t.Errorf("event index = %d, want %d", s.Event().GetIndex(), srv.Index())
	}
}

func TestEventStreamSkipSnapshotAndAfterIndex(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	first := srv.AppendEvents(deleted("e1"))
	srv.AppendEvents(deleted("e2"))

	s := m.EventStream(t.Context(), norsk.EventStreamSettings{AfterIndex: first})
	expect(t, s, "e2")
	s.Close()

	// Live only: events from when the stream is attached.
	s = m.EventStream(t.Context(), norsk.EventStreamSettings{SkipSnapshot: true})
	defer s.Close()
	go func() {
		if srv.WaitStreams(t.Context(), 2) == nil {
			srv.AppendEvents(deleted("e3"))
		}
	}()
	expect(t, s, "e3")
}

// TestEventStreamResumeSameIndex drops the connection between two events
// that share one index: the stream resumes after the index before and drops
// the event it had delivered.
func TestEventStreamResumeSameIndex(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	start := srv.AppendEvents(deleted("start"))
	srv.AppendEvents(deleted("a"))
	shared := srv.AppendEvents(deleted("b1"), deleted("b2"), deleted("b3"))
	srv.AppendEvents(deleted("c"))
	srv.SetStreamFault(func(conn, sent int, ev *managerv1.Event) error {
		if conn == 0 && label(ev) == "b2" {
			return connect.NewError(connect.CodeUnavailable, errors.New("connection reset"))
		}
		return nil
	})
	s := m.EventStream(t.Context(), norsk.EventStreamSettings{AfterIndex: start})
	defer s.Close()
	expect(t, s, "a", "b1", "b2", "b3", "c")

	reqs := srv.StreamRequests()
	if len(reqs) != 2 || reqs[1].GetAfterIndex() != shared-1 {
		t.Fatalf("stream requests = %v; want a resume after %d", reqs, shared-1)
	}
	if s.Duplicates() != 1 || s.Reconnects() != 1 {
		t.Errorf("duplicates = %d, reconnects = %d; want 1, 1", s.Duplicates(), s.Reconnects())
	}
}

// TestEventStreamExactlyOnce breaks the stream at random points, with
// UNAVAILABLE, RESOURCE_EXHAUSTED and clean ends, while events (several per
// index) keep coming: the consumer sees every event once, in order.
func TestEventStreamExactlyOnce(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			srv := norsktest.NewServer(t)
			m := connectTo(t, srv)
			var mu sync.Mutex
			rng := rand.New(rand.NewPCG(seed, 0))
			srv.SetStreamFault(func(conn, sent int, ev *managerv1.Event) error {
				mu.Lock()
				defer mu.Unlock()
				switch rng.IntN(20) {
				case 0:
					return connect.NewError(connect.CodeUnavailable, errors.New("reset"))
				case 1:
					return connect.NewError(connect.CodeResourceExhausted, errors.New("consumer too slow"))
				case 2:
					return norsktest.ErrEndStream
				}
				return nil
			})
			start := srv.AppendEvents(deleted("before"))
			var want []string
			appendBatch := func(i int) {
				evs := make([]*managerv1.Event, 1+i%4)
				for j := range evs {
					id := fmt.Sprintf("e%d.%d", i, j)
					evs[j] = deleted(id)
					want = append(want, id)
				}
				srv.AppendEvents(evs...)
			}
			for i := range 40 {
				appendBatch(i)
			}
			s := m.EventStream(t.Context(), norsk.EventStreamSettings{AfterIndex: start})
			defer s.Close()
			var last uint64
			for n := 0; n < len(want); n++ {
				ev := next(t, s)
				if got := label(ev); got != want[n] {
					t.Fatalf("event %d = %s, want %s (duplicates %d, reconnects %d)", n, got, want[n], s.Duplicates(), s.Reconnects())
				}
				if ev.GetIndex() < last {
					t.Fatalf("index went back from %d to %d", last, ev.GetIndex())
				}
				last = ev.GetIndex()
				if n == 20 {
					// Live events while the backlog drains.
					for i := 40; i < 60; i++ {
						appendBatch(i)
					}
				}
			}
			if s.Reconnects() == 0 || s.Duplicates() == 0 {
				t.Errorf("reconnects = %d, duplicates = %d; the fault hook did not exercise resuming", s.Reconnects(), s.Duplicates())
			}
		})
	}
}

func TestEventStreamSnapshotInterrupted(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := m.CreateJob(t.Context(), testJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	srv.SetStreamFault(func(conn, sent int, ev *managerv1.Event) error {
		if conn == 0 && sent == 2 {
			return connect.NewError(connect.CodeUnavailable, errors.New("reset"))
		}
		return nil
	})
	s := m.EventStream(t.Context(), norsk.EventStreamSettings{})
	defer s.Close()
	expect(t, s, "snap:a", "snap:b", "snap:c", "complete(resync=false)")
	srv.AppendEvents(deleted("after"))
	expect(t, s, "after")
	if reqs := srv.StreamRequests(); len(reqs) != 2 || reqs[1].GetAfterIndex() != 0 || reqs[1].GetSkipSnapshot() {
		t.Errorf("stream requests = %v; want the snapshot asked for again", reqs)
	}
}

// TestEventStreamResync: the Manager no longer holds the events a resume
// asks for, so it sends a fresh snapshot, which the stream passes through.
func TestEventStreamResync(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	if _, err := m.CreateJob(t.Context(), testJob("a")); err != nil {
		t.Fatal(err)
	}
	s := m.EventStream(t.Context(), norsk.EventStreamSettings{})
	defer s.Close()
	expect(t, s, "snap:a", "complete(resync=false)")
	srv.AppendEvents(deleted("x"))
	expect(t, s, "x")

	var once sync.Once
	srv.SetStreamFault(func(conn, sent int, ev *managerv1.Event) error {
		if conn != 0 {
			return nil
		}
		var err error
		once.Do(func() {
			// Compact the log past what the consumer has seen, then break.
			srv.ForgetEventsThrough(srv.Index())
			err = connect.NewError(connect.CodeUnavailable, errors.New("reset"))
		})
		return err
	})
	if _, err := m.CreateJob(t.Context(), testJob("b")); err != nil {
		t.Fatal(err)
	}
	expect(t, s, "snap:a", "snap:b", "complete(resync=true)")
	if _, err := m.CreateJob(t.Context(), testJob("c")); err != nil {
		t.Fatal(err)
	}
	expect(t, s, "created:c")
}

func TestEventStreamNonHealingErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code connect.Code
		want error
	}{
		{connect.CodeUnauthenticated, norsk.ErrUnauthenticated},
		{connect.CodePermissionDenied, norsk.ErrPermissionDenied},
		{connect.CodeInvalidArgument, norsk.ErrInvalidArgument},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			srv := norsktest.NewServer(t)
			m := connectTo(t, srv)
			// At connection time.
			srv.SetError("EventStream", connect.NewError(tc.code, errors.New("no")))
			s := m.EventStream(t.Context(), norsk.EventStreamSettings{})
			if s.Next() {
				t.Fatalf("Next = true")
			}
			if err := s.Err(); !errors.Is(err, tc.want) {
				t.Errorf("Err = %v; want %v", err, tc.want)
			}
			s.Close()
			srv.SetError("EventStream", nil)

			// In the middle of a stream: the events before it are delivered.
			start := srv.AppendEvents(deleted("zero"))
			srv.AppendEvents(deleted("one"))
			srv.AppendEvents(deleted("two"))
			srv.SetStreamFault(func(conn, sent int, ev *managerv1.Event) error {
				if label(ev) == "two" {
					return connect.NewError(tc.code, errors.New("no more"))
				}
				return nil
			})
			s2 := m.EventStream(t.Context(), norsk.EventStreamSettings{AfterIndex: start})
			defer s2.Close()
			expect(t, s2, "one")
			if s2.Next() {
				t.Fatalf("Next after a %v = true (%s)", tc.code, label(s2.Event()))
			}
			if err := s2.Err(); !errors.Is(err, tc.want) {
				t.Errorf("Err = %v; want %v", err, tc.want)
			}
			if s2.Reconnects() != 0 {
				t.Errorf("reconnected %d times after a non-healing error", s2.Reconnects())
			}
		})
	}
}

func TestEventStreamCancelAndClose(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)

	// Cancelling the context ends the stream with ErrCanceled.
	ctx, cancel := context.WithCancel(t.Context())
	s := m.EventStream(ctx, norsk.EventStreamSettings{})
	expect(t, s, "complete(resync=false)")
	time.AfterFunc(10*time.Millisecond, cancel)
	if s.Next() {
		t.Fatal("Next = true after cancel")
	}
	if err := s.Err(); !errors.Is(err, norsk.ErrCanceled) {
		t.Errorf("Err after cancel = %v", err)
	}
	s.Close()

	// Close from another goroutine unblocks Next; Err is then nil.
	s = m.EventStream(t.Context(), norsk.EventStreamSettings{})
	expect(t, s, "complete(resync=false)")
	time.AfterFunc(10*time.Millisecond, func() { s.Close() })
	if s.Next() {
		t.Fatal("Next = true after Close")
	}
	if err := s.Err(); err != nil {
		t.Errorf("Err after Close = %v", err)
	}

	// The channel form, ended by closing the Manager.
	s = m.EventStream(t.Context(), norsk.EventStreamSettings{})
	defer s.Close()
	ch := s.Events()
	if ev := <-ch; label(ev) != "complete(resync=false)" {
		t.Fatalf("first event = %s", label(ev))
	}
	srv.AppendEvents(deleted("z"))
	if ev := <-ch; label(ev) != "z" {
		t.Fatalf("event = %s", label(ev))
	}
	m.Close()
	for range ch {
	}
	if err := s.Err(); !errors.Is(err, norsk.ErrCanceled) {
		t.Errorf("Err after the Manager closed = %v", err)
	}
}

func TestEventStreamReconnectsWhileServerDown(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	srv.SetError("EventStream", connect.NewError(connect.CodeUnavailable, errors.New("no primary")))
	s := m.EventStream(t.Context(), norsk.EventStreamSettings{})
	defer s.Close()
	time.AfterFunc(30*time.Millisecond, func() { srv.SetError("EventStream", nil) })
	expect(t, s, "complete(resync=false)")
	if s.Reconnects() == 0 {
		t.Errorf("no reconnects counted")
	}
}

// TestEventStreamSubscribedWhenOpened opens a stream, acts at once, and
// sees the event of what it did: EventStream returns once subscribed.
func TestEventStreamSubscribedWhenOpened(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		settings norsk.EventStreamSettings
		first    []string
	}{
		{"live only", norsk.EventStreamSettings{SkipSnapshot: true}, nil},
		{"snapshot", norsk.EventStreamSettings{}, []string{"complete(resync=false)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := norsktest.NewServer(t)
			m := connectTo(t, srv)
			s := m.EventStream(t.Context(), tc.settings)
			defer s.Close()
			if _, err := m.CreateJob(t.Context(), testJob("a")); err != nil {
				t.Fatal(err)
			}
			expect(t, s, append(tc.first, "created:a")...)
		})
	}
}

// TestEventStreamLiveOnlyResumesExactly breaks a live-only stream before
// its first event: it resumes after the index it was subscribed at, so the
// event committed while it was away is delivered.
func TestEventStreamLiveOnlyResumesExactly(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	start := srv.AppendEvents(deleted("before"))
	srv.SetStreamFault(func(conn, sent int, ev *managerv1.Event) error {
		if conn == 0 && sent == 1 {
			srv.AppendEvents(deleted("while away"))
			return connect.NewError(connect.CodeUnavailable, errors.New("reset"))
		}
		return nil
	})
	s := m.EventStream(t.Context(), norsk.EventStreamSettings{SkipSnapshot: true})
	defer s.Close()
	srv.AppendEvents(deleted("after"))
	expect(t, s, "after", "while away")
	if reqs := srv.StreamRequests(); len(reqs) != 2 || reqs[1].GetAfterIndex() != start {
		t.Errorf("stream requests = %v; want a resume after %d", reqs, start)
	}
}
