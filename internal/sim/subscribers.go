package sim

import (
	"context"
	"math"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
)

// eventClient opens event streams on one member, decoding each event
// into a liteEvent.
type eventClient = connect.Client[managerv1.EventStreamRequest, liteEvent]

// eventStream is one open stream.
type eventStream = connect.ServerStreamForClient[liteEvent]

// newEventClient is an event-stream client of the member at base, over
// hc (the connection the member's SDK client uses), sending token.
func newEventClient(hc *http.Client, base, token string) *eventClient {
	return connect.NewClient[managerv1.EventStreamRequest, liteEvent](hc, base+managerv1connect.ManagerEventStreamProcedure,
		connect.WithGRPC(), connect.WithCodec(liteCodec{}), connect.WithInterceptors(bearer(token)))
}

// bearer sends the token as every stream's bearer.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// subscriber follows the event stream through one member after another: it
// starts on one, and when its stream ends (the member went away) it resumes
// on the next member after the last index it received. It reads each
// event as a liteEvent (only what it counts).
type subscriber struct {
	clients []*eventClient
	first   int
	jobs    *jobIndex

	mu sync.Mutex
	// cur is the member the stream is through; cancel ends that stream;
	// left: it was ended because the member went away.
	cur     int
	cancel  context.CancelFunc
	left    bool
	events  int64
	last    uint64
	lag     histogram
	resumes int
	resyncs int
	// atLast: events of index last taken; toDrop: how many of them a
	// resumed stream sends again.
	atLast, toDrop int
	running        []uint64 // bit per job ordinal: its running entry was seen
	nRunning       int
	doneAt         time.Time // when every job's running entry had been seen
}

func newSubscriber(clients []*eventClient, first int, jobs *jobIndex) *subscriber {
	return &subscriber{clients: clients, first: first, jobs: jobs, running: make([]uint64, (jobs.n+63)/64)}
}

// ready opens the first stream (live events only) and returns once the
// subscription is in place (its first message, initial_data_complete, has
// arrived; nil if the stream failed: run then moves on); run then follows
// it.
func (s *subscriber) ready(ctx context.Context) *eventStream {
	sctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.cur, s.cancel = s.first%len(s.clients), cancel
	s.mu.Unlock()
	st, err := s.clients[s.cur].CallServerStream(sctx, connect.NewRequest(&managerv1.EventStreamRequest{SkipSnapshot: true}))
	if err != nil {
		return nil
	}
	if st.Receive() {
		s.take(st.Msg())
	}
	return st
}

// leave ends the stream if it is through member i (taken away): run
// resumes on the next member.
func (s *subscriber) leave(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == i && s.cancel != nil {
		s.cancel()
		s.left = true
	}
}

// run follows the stream until ctx ends. A stream whose member went away
// (leave) is followed on the next member; one that ended otherwise is
// opened again on the same member, as the SDK's stream reconnects, after
// a wait growing from 100 ms to 2 s while no event comes.
func (s *subscriber) run(ctx context.Context, st *eventStream) {
	wait := time.Duration(0)
	for ctx.Err() == nil {
		got := false
		if st != nil {
			for st.Receive() {
				got = true
				s.take(st.Msg())
			}
			_ = st.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if got {
			wait = 0
		} else {
			wait = min(max(2*wait, 100*time.Millisecond), 2*time.Second)
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
		}
		sctx, cancel := context.WithCancel(ctx)
		s.mu.Lock()
		s.cancel()
		if s.left {
			s.cur = (s.cur + 1) % len(s.clients)
			s.left = false
			s.resumes++
		}
		s.cancel = cancel
		// Ask again for the last index (one commit can carry many events,
		// and the stream may have ended between them), dropping the ones
		// already taken, as the SDK's own reconnect does.
		after, i := s.last, s.cur
		if after > 1 {
			after, s.toDrop = after-1, s.atLast
		}
		s.mu.Unlock()
		var err error
		st, err = s.clients[i].CallServerStream(sctx, connect.NewRequest(&managerv1.EventStreamRequest{AfterIndex: after, SkipSnapshot: after == 0}))
		if err != nil {
			st = nil
		}
	}
	s.mu.Lock()
	s.cancel()
	s.mu.Unlock()
}

func (s *subscriber) take(ev *liteEvent) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.initialDataComplete {
		if ev.resync {
			s.resyncs++ // fell out of the Manager's buffer: a snapshot replaced the gap
		}
		return
	}
	switch i := ev.index; {
	case i < s.last:
		return // already taken before a resume
	case i == s.last && s.toDrop > 0:
		s.toDrop--
		return
	case i == s.last:
		s.atLast++
	default:
		s.last, s.atLast, s.toDrop = i, 1, 0
	}
	s.events++
	if !ev.timestamp.IsZero() {
		s.lag.add(now.Sub(ev.timestamp))
	}
	// A job's running entry, or a resync's snapshot showing the job's
	// instance running now.
	jobID := ev.runningJobID
	if jobID == "" {
		jobID = ev.snapshotRunningJobID
	}
	if jobID != "" {
		if o, ok := s.jobs.ordinal(jobID); ok {
			w, b := o/64, uint64(1)<<(o%64)
			if s.running[w]&b == 0 {
				s.running[w] |= b
				s.nRunning++
				if s.nRunning == s.jobs.n {
					s.doneAt = now
				}
			}
		}
	}
}

// SubscriberStats is what one subscriber received. A job counts as seen
// running from its running history entry, or from a resync snapshot
// showing its instance running.
type SubscriberStats struct {
	Events  int64
	Resumes int
	// Resyncs: the subscriber fell out of the Manager's event buffer and
	// was sent a snapshot in place of the events it missed.
	Resyncs int
	// RunningSeen is how many jobs' running entries it saw; Complete
	// when it is every job's.
	RunningSeen int
	DoneAt      time.Time
	Lag         histogram
}

func (s *subscriber) stats() SubscriberStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SubscriberStats{Events: s.events, Resumes: s.resumes, Resyncs: s.resyncs, RunningSeen: s.nRunning, DoneAt: s.doneAt, Lag: s.lag}
}

// histogram counts durations in buckets growing by 2^(1/4) from 100 µs,
// for quantiles without keeping every sample.
type histogram struct {
	counts [128]int64
	n      int64
	max    time.Duration
	sum    time.Duration
}

const histBase = 100 * time.Microsecond

func (h *histogram) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := 0
	if d > histBase {
		i = min(int(4*math.Log2(float64(d)/float64(histBase)))+1, len(h.counts)-1)
	}
	h.counts[i]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *histogram) merge(o histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile is the upper bound of the bucket holding quantile q.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	want := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= want {
			if i == 0 {
				return histBase
			}
			return min(time.Duration(float64(histBase)*math.Pow(2, float64(i)/4)), h.max)
		}
	}
	return h.max
}

func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}
