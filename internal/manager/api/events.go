package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/eventsubject"
)

// DefaultEventWriteTimeout is how long one event may take to reach a
// subscriber before its stream is cut (a consumer that does not read at
// all); Config.EventWriteTimeout overrides it.
const DefaultEventWriteTimeout = 30 * time.Second

// rcKey holds a request's ResponseController in its context: the gate
// (manager/gate.go) puts it there, since connect does not expose the
// ResponseWriter, so a stream can set write deadlines.
type rcKey struct{}

// WithResponseController puts the request's ResponseController in its
// context, for the event stream to extend its write deadline.
func WithResponseController(ctx context.Context, rc *http.ResponseController) context.Context {
	return context.WithValue(ctx, rcKey{}, rc)
}

// eventBatchKey holds a request's *eventWriter in its context
// (BatchEventWrites).
type eventBatchKey struct{}

// BatchEventWrites serves the event stream (next) with its writes batched:
// connect flushes the response after every message, which over HTTP/2 is a
// frame, a hand-off to the connection's writer and a system call per event
// and subscriber. Under it the stream holds those flushes while it sends a
// batch of events and flushes once at the batch's end (what it sends is
// written as the response's buffer fills, and all of it by the batch's
// end): a subscriber that keeps up gets each event as soon as before (its
// batches are of one), one that is behind gets its events in fewer, fuller
// frames. The gate (which puts the ResponseController in the context) runs
// before it.
func BatchEventWrites(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ew := &eventWriter{ResponseWriter: w}
		next.ServeHTTP(ew, r.WithContext(context.WithValue(r.Context(), eventBatchKey{}, ew)))
	})
}

// eventWriter is the event stream's response writer: it holds flushes
// during a batch. Used by the stream's one goroutine.
type eventWriter struct {
	http.ResponseWriter
	held, pending bool
}

// Flush flushes the response unless a batch holds it.
func (w *eventWriter) Flush() {
	if w.held {
		w.pending = true
		return
	}
	_ = w.flush()
}

func (w *eventWriter) flush() error {
	switch f := w.ResponseWriter.(type) {
	case interface{ FlushError() error }:
		return f.FlushError()
	case http.Flusher:
		f.Flush()
	}
	return nil
}

// Unwrap lets a ResponseController reach the server's writer.
func (w *eventWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hold starts a batch.
func (w *eventWriter) hold() { w.held = true }

// release ends a batch, flushing what it held.
func (w *eventWriter) release() error {
	w.held = false
	if !w.pending {
		return nil
	}
	w.pending = false
	return w.flush()
}

// eventOut is how the event stream writes: in batches (each ends with one
// flush), each write under a deadline. A write gets at least the write
// timeout and at most one and a half times it: the deadline is set to 1.5×
// the timeout ahead and moved on only once half the timeout has passed, so
// a batch sets it once or a few times, not once per event (over HTTP/2
// setting it is a message to the connection's goroutine). Between batches
// no deadline is set: over HTTP/2 a deadline left set resets an idle stream
// when it passes.
type eventOut struct {
	rc      *http.ResponseController // nil: no deadlines
	w       *eventWriter             // nil: connect flushes each message
	timeout time.Duration
	armed   time.Time // when the deadline was set; zero: none is
}

// beforeWrite sets or moves the deadline when it is due.
func (o *eventOut) beforeWrite() {
	if o.rc == nil {
		return
	}
	now := time.Now()
	if o.armed.IsZero() || now.Sub(o.armed) > o.timeout/2 {
		_ = o.rc.SetWriteDeadline(now.Add(o.timeout + o.timeout/2))
		o.armed = now
	}
}

func (o *eventOut) startBatch() {
	if o.w != nil {
		o.w.hold()
	}
}

// done lets connect flush again as it writes the stream's end.
func (o *eventOut) done() {
	if o.w != nil {
		o.w.held = false
	}
}

// endBatch flushes the batch and clears the deadline.
func (o *eventOut) endBatch() error {
	var err error
	if o.w != nil {
		o.beforeWrite()
		err = o.w.release()
	}
	if o.rc != nil && !o.armed.IsZero() {
		_ = o.rc.SetWriteDeadline(time.Time{})
		o.armed = time.Time{}
	}
	return err
}

func (h *Handler) EventStream(ctx context.Context, req *connect.Request[managerv1.EventStreamRequest], stream *connect.ServerStream[managerv1.Event]) error {
	filter, err := eventsubject.NewFilter(req.Msg)
	if err != nil {
		var fe *eventsubject.FieldError
		if errors.As(err, &fe) {
			return rpcerr.ToConnect(apierr.Invalid(fe.Field, "%s", fe.Message))
		}
		return rpcerr.ToConnect(err)
	}
	out := &eventOut{timeout: h.cfg.EventWriteTimeout}
	out.rc, _ = ctx.Value(rcKey{}).(*http.ResponseController)
	out.w, _ = ctx.Value(eventBatchKey{}).(*eventWriter)
	defer out.done()
	// send sends one event of a batch. A published event goes as the
	// broker's entry, whose encoding every subscriber shares (the API's
	// codecs recognise it: intercept.Encoded); a snapshot's events are
	// this subscriber's own.
	sent := 0
	send := func(e *events.Entry) error {
		if !filter.MatchDescribed(e) {
			return nil // filtered here, before the write
		}
		out.beforeWrite()
		if err := stream.Conn().Send(e); err != nil {
			return err
		}
		sent++
		return nil
	}
	// endBatch flushes what the batch sent.
	endBatch := func() error {
		err := out.endBatch()
		if sent > 0 {
			h.cfg.Metrics.Sent.Add(float64(sent))
			sent = 0
		}
		return err
	}
	// A credential revoked or expired while the stream is open ends it
	// before anything more is sent (checked before each batch: a quiet
	// stream holds nothing to leak, and ends at its next event).
	caller, _ := auth.CallerOf(ctx)
	stillAllowed := func() error {
		if caller.Recheck == nil {
			return nil
		}
		return caller.Recheck()
	}
	broker := h.b.Store().Broker()
	var sub *events.Subscription
	snapshot := func(resync bool) error {
		out.startBatch()
		sub = broker.SubscribeTail()
		r := h.read()
		idx := r.Index()
		sub.Skip(idx)
		ts := timestamppb.New(h.cfg.Clock.Now())
		for _, rec := range r.Nodes(nil) {
			if err := send(events.NewEntry(&managerv1.Event{Index: idx, Timestamp: ts, Kind: &managerv1.Event_NodeSnapshot{NodeSnapshot: h.NodeView(r, rec)}})); err != nil {
				return err
			}
		}
		var err error
		r.Jobs(nil, "", func(rec *storev1.JobRecord) bool {
			err = send(events.NewEntry(&managerv1.Event{Index: idx, Timestamp: ts, Kind: &managerv1.Event_JobSnapshot{JobSnapshot: r.JobView(rec, true)}}))
			return err == nil
		})
		if err != nil {
			return err
		}
		err = send(events.NewEntry(&managerv1.Event{Index: idx, Timestamp: ts, Kind: &managerv1.Event_InitialDataComplete{
			InitialDataComplete: &managerv1.InitialDataComplete{Index: idx, Resync: resync},
		}}))
		if err != nil {
			return err
		}
		return endBatch()
	}
	after := req.Msg.GetAfterIndex()
	switch {
	case after == 0 && req.Msg.GetSkipSnapshot():
		// Live events only. The empty snapshot's initial_data_complete
		// tells the client it is subscribed and the index live events
		// start after (where it resumes from if the stream breaks).
		sub = broker.SubscribeTail()
		idx := h.read().Index()
		sub.Skip(idx)
		err = send(events.NewEntry(&managerv1.Event{Index: idx, Timestamp: timestamppb.New(h.cfg.Clock.Now()), Kind: &managerv1.Event_InitialDataComplete{
			InitialDataComplete: &managerv1.InitialDataComplete{Index: idx},
		}}))
		if err == nil {
			err = endBatch()
		}
	case after == 0:
		err = snapshot(false)
	case after > h.read().Index():
		// The caller has seen more than this store holds (it was restored
		// from an older backup): start it again from what is here.
		err = snapshot(true)
	default:
		sub, err = broker.SubscribeAfter(after)
		if errors.Is(err, events.ErrResync) {
			err = snapshot(true)
		}
	}
	if err != nil {
		return streamErr(err, 0)
	}
	h.cfg.Metrics.Subscribers.Inc()
	defer h.cfg.Metrics.Subscribers.Dec()
	var last uint64
	for {
		evs, err := sub.NextEntries(ctx)
		if errors.Is(err, events.ErrResync) {
			// The state was replaced by a snapshot restore: start the
			// subscriber again from what is here now.
			if err := snapshot(true); err != nil {
				return streamErr(err, last)
			}
			continue
		}
		if err != nil {
			if isSlowConsumer(err) {
				h.cfg.Metrics.Drops.Inc()
			}
			return streamErr(err, last)
		}
		if err := stillAllowed(); err != nil {
			return rpcerr.ToConnect(err)
		}
		out.startBatch()
		for _, e := range evs {
			if err := send(e); err != nil {
				return streamErr(err, last)
			}
			last = e.Index()
		}
		if err := endBatch(); err != nil {
			return streamErr(err, last)
		}
	}
}

func streamErr(err error, last uint64) error {
	switch {
	case errors.Is(err, events.ErrSlowConsumer):
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("%v; reconnect with afterIndex=%d to resume", err, last))
	case errors.Is(err, events.ErrClosed):
		return connect.NewError(connect.CodeUnavailable, errors.New("the Manager is shutting down; reconnect to resume"))
	}
	return rpcerr.ToConnect(err)
}

// isSlowConsumer: an event subscriber cut off for falling behind.
func isSlowConsumer(err error) bool { return errors.Is(err, events.ErrSlowConsumer) }
