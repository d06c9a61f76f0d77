package api

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/manager/eventwrite"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/eventsubject"
)

func (h *Handler) EventStream(ctx context.Context, req *connect.Request[managerv1.EventStreamRequest], stream *connect.ServerStream[managerv1.Event]) error {
	filter, err := eventsubject.NewFilter(req.Msg)
	if err != nil {
		var fe *eventsubject.FieldError
		if errors.As(err, &fe) {
			return rpcerr.ToConnect(apierr.Invalid(fe.Field, "%s", fe.Message))
		}
		return rpcerr.ToConnect(err)
	}
	// Events go in batches flushed at their end (eventwrite); a published
	// one as the broker's entry, whose encoding every subscriber shares
	// (intercept.Encoded), a snapshot's as this subscriber's own.
	out := eventwrite.New(ctx, h.cfg.EventWriteTimeout)
	defer out.Done()
	sent := 0
	send := func(e *events.Entry) error {
		if !filter.MatchDescribed(e) {
			return nil // filtered here, before the write
		}
		out.BeforeWrite()
		if err := stream.Conn().Send(e); err != nil {
			return err
		}
		sent++
		return nil
	}
	endBatch := func() error { // flushes what the batch sent
		h.cfg.Metrics.Sent.Add(float64(sent))
		sent = 0
		return out.EndBatch()
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
		out.StartBatch()
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
			h.cfg.Metrics.Resyncs.Inc()
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
		out.StartBatch()
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
