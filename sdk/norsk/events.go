package norsk

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// EventStreamSettings say where an event stream starts.
type EventStreamSettings struct {
	// AfterIndex resumes after this store index: the stream starts with every
	// event whose index is greater. 0 starts with a snapshot of everything
	// (job_snapshot and node_snapshot events, then initial_data_complete
	// carrying the snapshot's index).
	AfterIndex uint64
	// SkipSnapshot, with AfterIndex 0, starts with live events only: every
	// event committed after EventStream returned, and possibly a few from
	// just before.
	SkipSnapshot bool

	// Filters, applied by the Manager before it sends: the stream carries
	// the events that match every filter given (a filter matches an event
	// about one of its values; snapshot events are filtered too, and
	// initial_data_complete always comes). Nil = no filter. An unknown kind
	// or an empty value ends the stream with ErrInvalidArgument. See
	// EventKindOf, EventJobID, EventNodeIDs and EventBundleID for what an
	// event is about.
	Kinds     []EventKind
	JobIDs    []string // job events, placements, migrations of these jobs
	NodeIDs   []string // node events, and job, placement and migration events touching these nodes
	BundleIDs []string // bundle events and the job events of their jobs
}

// EventStream follows the Manager's event stream, scanner style:
//
//	s := m.EventStream(ctx, norsk.EventStreamSettings{})
//	defer s.Close()
//	for s.Next() {
//		ev := s.Event()
//		…
//	}
//	if err := s.Err(); err != nil { … }
//
// It reconnects by itself when the stream breaks (a network error, a Manager
// restart, UNAVAILABLE, or RESOURCE_EXHAUSTED for a consumer that fell
// behind), with exponential, jittered backoff from 100 ms to 5 s, and resumes
// where it left off: it asks for the events after the index before the last
// one it delivered and drops those of that index it had already delivered,
// so that the consumer sees every event exactly once and in order. Several
// events can share one index.
//
// A snapshot (job_snapshot and node_snapshot events ending with
// initial_data_complete) is delivered as a whole once its
// initial_data_complete has arrived: a snapshot cut off by a disconnect is
// discarded and fetched again, never delivered twice. When the Manager no
// longer holds the events a resume asks for, it sends a fresh snapshot
// instead, which the stream passes through: its initial_data_complete has
// resync set, and it replaces what the consumer knew.
//
// The stream retries UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED, UNKNOWN,
// INTERNAL, DEADLINE_EXCEEDED (while its own context has time left) and a
// clean end of the server's stream. Every other code will not heal and ends
// the stream (UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT,
// NOT_FOUND, UNIMPLEMENTED, …), as does the cancellation or deadline of its
// context and Close of the Manager; Err then returns it as an *Error. After
// the stream's own Close, Err returns nil.
//
// The stream is subscribed when EventStream returns: it connects at once
// and, when it starts from a snapshot or from live events, waits for the
// Manager's first message, so a caller can open a stream, then act, and see
// the events of what it did. (A stream resuming from AfterIndex needs no
// wait: what follows that index is held for it.)
//
// One corner cannot be resumed exactly, because after_index 0 means "a
// snapshot": events of store index 1 not yet received when a stream breaks
// are not asked for again.
//
// Next, Event and Err must be called from one goroutine; Close may be called
// from any goroutine, at any time.
type EventStream struct {
	m      *Manager
	ctx    context.Context
	cancel context.CancelFunc
	stop   func() bool // detaches ctx from the Manager's lifetime

	mu     sync.Mutex // held by Next; Close takes it to release the stream
	stream *connect.ServerStreamForClient[managerv1.Event]

	// Resume state. floor: events with index <= floor have been delivered
	// (or are covered by a delivered snapshot). last: the index of the last
	// live event accepted; atLast: how many events of that index were
	// accepted; toDrop: how many events of index last the current connection
	// will resend and must be dropped.
	filter         *managerv1.EventStreamRequest // the filter fields of every request
	floor, last    uint64
	atLast, toDrop int
	skipSnapshot   bool
	snapshotSeen   bool
	attempt        int // consecutive failed connections

	skipping bool  // the current connection asked for live events only
	openErr  error // why the connection opened by EventStream broke
	openBad  bool  // it broke: Next handles openErr first

	snapshot []*Event // a snapshot being received; discarded on disconnect
	ready    []*Event // accepted, not yet handed out

	cur        *Event
	err        error
	done       bool
	userClosed atomic.Bool

	duplicates atomic.Uint64
	reconnects atomic.Uint64

	chOnce sync.Once
	ch     chan *Event
	wg     sync.WaitGroup
}

// EventStream opens the Manager's event stream. It connects before it
// returns and, unless it resumes from s.AfterIndex, waits for the Manager's
// first message (bounded by ctx), so the stream is subscribed: what the
// caller does next is seen on it. A failed connection is not an error here:
// Next retries it as any break, and Err reports what will not heal after
// Next returns false. The stream ends when ctx is cancelled, when m is
// closed, or with Close, which the caller must call.
func (m *Manager) EventStream(ctx context.Context, s EventStreamSettings) *EventStream {
	ctx, cancel := context.WithCancel(ctx)
	es := &EventStream{
		m:            m,
		ctx:          ctx,
		cancel:       cancel,
		stop:         context.AfterFunc(m.closed, cancel),
		floor:        s.AfterIndex,
		skipSnapshot: s.SkipSnapshot,
		filter:       &managerv1.EventStreamRequest{JobIds: s.JobIDs, NodeIds: s.NodeIDs, BundleIds: s.BundleIDs},
	}
	for _, k := range s.Kinds {
		es.filter.Kinds = append(es.filter.Kinds, string(k))
	}
	es.open()
	return es
}

// open makes the first connection and, for a snapshot or live-only start,
// receives the first message: the Manager sends it once the subscription
// is in place (a snapshot's first event, or the initial_data_complete that
// starts a live-only stream).
func (s *EventStream) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return // Next reports it
	}
	if err := s.dial(); err != nil {
		s.openErr, s.openBad = err, true
		return
	}
	if s.floor != 0 {
		return
	}
	if s.stream.Receive() {
		s.accept(s.stream.Msg())
		return
	}
	s.openErr, s.openBad = s.stream.Err(), true
}

// Next waits for the next event and reports whether there is one; Event then
// returns it. When Next returns false the stream has ended: Err says why.
func (s *EventStream) Next() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = nil
	for !s.done {
		if len(s.ready) > 0 {
			s.cur = s.ready[0]
			s.ready[0] = nil
			s.ready = s.ready[1:]
			return true
		}
		if s.ctx.Err() != nil {
			s.finish(s.ctx.Err())
			break
		}
		if s.openBad {
			s.openBad = false
			s.broken(s.openErr)
			continue
		}
		if s.stream == nil {
			if err := s.dial(); err != nil {
				s.broken(err)
			}
			continue
		}
		if s.stream.Receive() {
			s.attempt = 0
			s.accept(s.stream.Msg())
			continue
		}
		s.broken(s.stream.Err())
	}
	return false
}

// Event is the event the last successful Next returned.
func (s *EventStream) Event() *Event { return s.cur }

// Err is why the stream ended: nil after Close, otherwise an *Error (ErrCanceled
// for a cancelled context or a closed Manager).
func (s *EventStream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Duplicates is how many events the stream has dropped because a resumed
// connection sent them again after they had been delivered.
func (s *EventStream) Duplicates() uint64 { return s.duplicates.Load() }

// Reconnects is how many times the stream has connected again after a
// break.
func (s *EventStream) Reconnects() uint64 { return s.reconnects.Load() }

// Events returns a channel carrying the stream's events, for use in a select;
// it is closed when the stream ends (Err then says why). Use either Events or
// Next, not both. The goroutine feeding the channel ends with the stream.
func (s *EventStream) Events() <-chan *Event {
	s.chOnce.Do(func() {
		s.ch = make(chan *Event)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer close(s.ch)
			for s.Next() {
				select {
				case s.ch <- s.Event():
				case <-s.ctx.Done():
					return
				}
			}
		}()
	})
	return s.ch
}

// Close ends the stream and waits for its connection and goroutine to be
// released. It is safe to call more than once, and concurrently with Next.
func (s *EventStream) Close() error {
	s.userClosed.Store(true)
	s.cancel()
	s.mu.Lock()
	s.finish(nil)
	s.mu.Unlock()
	s.wg.Wait()
	s.stop()
	return nil
}

// resumeRequest is the request of the next connection and how many events
// of index last it will send again.
func (s *EventStream) resumeRequest() (*managerv1.EventStreamRequest, int) {
	req := &managerv1.EventStreamRequest{AfterIndex: s.floor, Kinds: s.filter.GetKinds(),
		JobIds: s.filter.GetJobIds(), NodeIds: s.filter.GetNodeIds(), BundleIds: s.filter.GetBundleIds()}
	drop := 0
	if s.last > 0 {
		// Ask again for the last index: some of its events may not have
		// arrived. Index 1 cannot be asked for again (after_index 0 means a
		// snapshot); events of index 1 not yet received are then lost.
		if s.last > 1 {
			req.AfterIndex, drop = s.last-1, s.atLast
		} else {
			req.AfterIndex = s.last
		}
	}
	if req.AfterIndex == 0 {
		// A second snapshot would repeat what the consumer has: skip it.
		req.SkipSnapshot = s.skipSnapshot || s.snapshotSeen
	}
	return req, drop
}

// dial opens a connection asking for the events after the resume point.
func (s *EventStream) dial() error {
	req, drop := s.resumeRequest()
	s.toDrop, s.skipping = drop, req.SkipSnapshot
	stream, err := s.m.streams.EventStream(s.ctx, connect.NewRequest(req))
	if err != nil {
		return err
	}
	s.stream = stream
	return nil
}

// broken handles the end of a connection: it ends the stream when err will
// not heal and otherwise waits out the backoff before the next dial.
func (s *EventStream) broken(err error) {
	if s.stream != nil {
		_ = s.stream.Close()
		s.stream = nil
	}
	s.snapshot = nil
	if s.ctx.Err() != nil {
		s.finish(s.ctx.Err())
		return
	}
	if deadline, ok := s.ctx.Deadline(); ok && !time.Now().Before(deadline) {
		// The server ended the stream at the deadline it was sent (gRPC
		// propagates it), before the local timer fired.
		s.finish(context.DeadlineExceeded)
		return
	}
	if !heals(err) {
		s.finish(err)
		return
	}
	delay := s.backoff()
	req, _ := s.resumeRequest()
	s.m.logger.LogAttrs(s.ctx, slog.LevelInfo, "norsk: event stream broken; reconnecting",
		slog.String("error", errString(err)), slog.Uint64("after_index", req.AfterIndex), slog.Duration("delay", delay))
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		s.reconnects.Add(1)
	case <-s.ctx.Done():
		s.finish(s.ctx.Err())
	}
}

// backoff is the wait before the next connection: exponential from the
// Manager's minimum to its maximum, jittered into [d/2, d).
func (s *EventStream) backoff() time.Duration {
	d := s.m.backoffMin
	for i := 0; i < s.attempt && d < s.m.backoffMax; i++ {
		d *= 2
	}
	d = min(d, s.m.backoffMax)
	s.attempt++
	half := d / 2
	return half + rand.N(half+1)
}

// accept takes one event off the wire: snapshot events are held until their
// initial_data_complete, live events already delivered are dropped.
func (s *EventStream) accept(ev *Event) {
	switch k := ev.GetKind().(type) {
	case *managerv1.Event_JobSnapshot, *managerv1.Event_NodeSnapshot:
		s.snapshot = append(s.snapshot, ev)
	case *managerv1.Event_InitialDataComplete:
		if s.skipping && len(s.snapshot) == 0 && !k.InitialDataComplete.GetResync() {
			// The start of a live-only stream: nothing to deliver, but
			// the index it resumes after.
			s.floor, s.last, s.atLast, s.toDrop = k.InitialDataComplete.GetIndex(), 0, 0, 0
			return
		}
		s.ready = append(s.ready, s.snapshot...)
		s.ready = append(s.ready, ev)
		s.snapshot = nil
		s.snapshotSeen = true
		s.floor, s.last, s.atLast, s.toDrop = k.InitialDataComplete.GetIndex(), 0, 0, 0
	default:
		i := ev.GetIndex()
		switch {
		case i <= s.floor && s.floor > 0, i < s.last:
			s.duplicates.Add(1)
			return
		case i == s.last && s.toDrop > 0:
			s.toDrop--
			s.duplicates.Add(1)
			return
		case i == s.last:
			s.atLast++
		default:
			s.last, s.atLast, s.toDrop = i, 1, 0
		}
		s.ready = append(s.ready, ev)
	}
}

// finish ends the stream with err (nil after Close).
func (s *EventStream) finish(err error) {
	if s.stream != nil {
		_ = s.stream.Close()
		s.stream = nil
	}
	s.ready, s.snapshot = nil, nil
	if s.done {
		return
	}
	s.done = true
	s.stop()
	if s.userClosed.Load() {
		return
	}
	s.err = wrapError("EventStream", err)
}

// heals reports whether a broken connection is worth dialling again: a clean
// end (nil), the transient codes, and errors that carry no code.
func heals(err error) bool {
	if err == nil {
		return true
	}
	switch codeOf(err) {
	case connect.CodeUnavailable, connect.CodeResourceExhausted, connect.CodeAborted,
		connect.CodeUnknown, connect.CodeInternal, connect.CodeDeadlineExceeded:
		return true
	}
	return false
}

func errString(err error) string {
	if err == nil {
		return "stream ended"
	}
	return err.Error()
}
