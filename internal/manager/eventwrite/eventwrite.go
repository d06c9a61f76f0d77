// Package eventwrite is how the event stream writes to a subscriber: in
// batches, each flushed once at its end, each write under a deadline that
// cuts off a subscriber that does not read (decision 0062).
//
// connect flushes the response after every message it sends; over HTTP/2
// that is a frame, a hand-off to the connection's goroutine and a system
// call, per event and subscriber. Under Batching a stream holds those
// flushes while it sends a batch and flushes once at the batch's end (what
// it sends is written as the response's buffer fills, and all of it by the
// batch's end): a subscriber that keeps up gets each event as soon as
// before (its batches are of one), one that is behind gets its events in
// fewer, fuller frames.
package eventwrite

import (
	"context"
	"net/http"
	"time"
)

// DefaultTimeout is how long a write to a subscriber may block before its
// stream is cut (a consumer that does not read at all): at least this, at
// most one and a half times it (Out); the Manager's
// Config.EventWriteTimeout overrides it.
const DefaultTimeout = 30 * time.Second

// rcKey holds a request's ResponseController in its context: the gate puts
// it there, since connect does not expose the ResponseWriter, so a stream
// can set write deadlines.
type rcKey struct{}

// WithResponseController puts the request's ResponseController in its
// context, for the event stream to set its write deadlines.
func WithResponseController(ctx context.Context, rc *http.ResponseController) context.Context {
	return context.WithValue(ctx, rcKey{}, rc)
}

// batchKey holds a request's *writer in its context (Batching).
type batchKey struct{}

// Batching serves next (the event stream) with a response writer whose
// flushes an Out made from the request's context holds during a batch.
// The gate, which puts the ResponseController in the context, runs before
// it.
func Batching(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bw := &writer{ResponseWriter: w}
		next.ServeHTTP(bw, r.WithContext(context.WithValue(r.Context(), batchKey{}, bw)))
	})
}

// writer holds flushes during a batch. Used by the stream's one goroutine.
type writer struct {
	http.ResponseWriter
	held, pending bool
}

// Flush flushes the response unless a batch holds it.
func (w *writer) Flush() {
	if w.held {
		w.pending = true
		return
	}
	_ = w.flush()
}

func (w *writer) flush() error {
	switch f := w.ResponseWriter.(type) {
	case interface{ FlushError() error }:
		return f.FlushError()
	case http.Flusher:
		f.Flush()
	}
	return nil
}

// Unwrap lets a ResponseController reach the server's writer.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// release ends a batch, flushing what it held.
func (w *writer) release() error {
	w.held = false
	if !w.pending {
		return nil
	}
	w.pending = false
	return w.flush()
}

// Out is how one stream writes. A write gets at least the write timeout and
// at most one and a half times it: the deadline is set to 1.5× the timeout
// ahead and moved on only once half the timeout has passed, so a batch sets
// it once or a few times, not once per event (over HTTP/2 setting it is a
// message to the connection's goroutine). Between batches no deadline is
// set: over HTTP/2 a deadline left set resets an idle stream when it
// passes. Used by the stream's one goroutine.
type Out struct {
	rc      *http.ResponseController // nil: no deadlines
	w       *writer                  // nil: connect flushes each message
	timeout time.Duration
	armed   time.Time // when the deadline was set; zero: none is
}

// New is the Out of the stream whose handler has ctx: without Batching
// (or without the gate's ResponseController) it leaves connect's flushes
// (or the deadlines) alone.
func New(ctx context.Context, timeout time.Duration) *Out {
	o := &Out{timeout: timeout}
	o.rc, _ = ctx.Value(rcKey{}).(*http.ResponseController)
	o.w, _ = ctx.Value(batchKey{}).(*writer)
	return o
}

// BeforeWrite sets or moves the deadline when it is due; call it before
// each message.
func (o *Out) BeforeWrite() {
	if o.rc == nil {
		return
	}
	now := time.Now()
	if o.armed.IsZero() || now.Sub(o.armed) > o.timeout/2 {
		_ = o.rc.SetWriteDeadline(now.Add(o.timeout + o.timeout/2))
		o.armed = now
	}
}

// StartBatch holds connect's flushes until EndBatch.
func (o *Out) StartBatch() {
	if o.w != nil {
		o.w.held = true
	}
}

// EndBatch flushes the batch and clears the deadline.
func (o *Out) EndBatch() error {
	var err error
	if o.w != nil {
		o.BeforeWrite()
		err = o.w.release()
	}
	if o.rc != nil && !o.armed.IsZero() {
		_ = o.rc.SetWriteDeadline(time.Time{})
		o.armed = time.Time{}
	}
	return err
}

// Done lets connect flush again, as it writes the stream's end; the
// handler defers it.
func (o *Out) Done() {
	if o.w != nil {
		o.w.held = false
	}
}
