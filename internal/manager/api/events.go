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

func (h *Handler) EventStream(ctx context.Context, req *connect.Request[managerv1.EventStreamRequest], stream *connect.ServerStream[managerv1.Event]) error {
	filter, err := eventsubject.NewFilter(req.Msg)
	if err != nil {
		var fe *eventsubject.FieldError
		if errors.As(err, &fe) {
			return rpcerr.ToConnect(apierr.Invalid(fe.Field, "%s", fe.Message))
		}
		return rpcerr.ToConnect(err)
	}
	rc, _ := ctx.Value(rcKey{}).(*http.ResponseController)
	send := func(e *managerv1.Event) error {
		if !filter.Match(e) {
			return nil // filtered here, before the write
		}
		if rc != nil {
			// The deadline covers this write only: over HTTP/2 a deadline
			// left set resets an idle stream when it passes.
			_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.EventWriteTimeout))
			defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
		}
		if err := stream.Send(e); err != nil {
			return err
		}
		h.cfg.Metrics.Sent.Inc()
		return nil
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
		sub = broker.SubscribeTail()
		r := h.read()
		idx := r.Index()
		sub.Skip(idx)
		ts := timestamppb.New(h.cfg.Clock.Now())
		for _, rec := range r.Nodes(nil) {
			if err := send(&managerv1.Event{Index: idx, Timestamp: ts, Kind: &managerv1.Event_NodeSnapshot{NodeSnapshot: h.NodeView(r, rec)}}); err != nil {
				return err
			}
		}
		var err error
		r.Jobs(nil, "", func(rec *storev1.JobRecord) bool {
			err = send(&managerv1.Event{Index: idx, Timestamp: ts, Kind: &managerv1.Event_JobSnapshot{JobSnapshot: r.JobView(rec, true)}})
			return err == nil
		})
		if err != nil {
			return err
		}
		return send(&managerv1.Event{Index: idx, Timestamp: ts, Kind: &managerv1.Event_InitialDataComplete{
			InitialDataComplete: &managerv1.InitialDataComplete{Index: idx, Resync: resync},
		}})
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
		err = send(&managerv1.Event{Index: idx, Timestamp: timestamppb.New(h.cfg.Clock.Now()), Kind: &managerv1.Event_InitialDataComplete{
			InitialDataComplete: &managerv1.InitialDataComplete{Index: idx},
		}})
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
		evs, err := sub.Next(ctx)
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
		for _, e := range evs {
			if err := send(e); err != nil {
				return streamErr(err, last)
			}
			last = e.GetIndex()
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
