package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// ConsistencyHeader asks for a linearizable read: with the value
// "linearizable" the member answers only after it has applied everything
// the primary had committed when the call arrived (the primary confirms it
// still leads first). Without it reads are served from the member's own
// copy, which on a follower may trail the primary by a few milliseconds.
const ConsistencyHeader = "Norsk-Consistency"

// leaderWait bounds how long a write waits for a primary to be elected
// before it fails with UNAVAILABLE (a failover takes about a second).
const leaderWait = 5 * time.Second

// errNotPrimary is a Members call reaching a member that no longer leads.
var errNotPrimary = errors.New("this member is not the primary")

// ApplyCall stamps a command made on behalf of the API call in ctx with the
// time and the call (for the audit log) and commits it (Apply).
func (m *Member) ApplyCall(ctx context.Context, cmd *storev1.Command) (state.Result, error) {
	cmd.Time = timestamppb.New(m.cfg.Clock.Now())
	cmd.Audit = m.cfg.Audit(ctx, cmd)
	return m.Apply(ctx, cmd)
}

// Apply commits a stamped command: on the primary directly; on a follower
// by forwarding it to the primary, then waiting until this member has
// applied it (so the caller reads its own write here). It is the daemon's
// one write path.
func (m *Member) Apply(ctx context.Context, cmd *storev1.Command) (state.Result, error) {
	st := m.Store()
	if st == nil {
		return state.Result{}, apierr.Unavailablef("the store is being replaced (a recovery); retry")
	}
	if !m.Clustered() || st.IsLeader() {
		return m.applyAsPrimary(ctx, st, cmd)
	}
	// A follower applies the write too before it answers: one whose own
	// store cannot (a full disk, a damaged log) says so now.
	if err := st.WriteError(); err != nil {
		return state.Result{}, err
	}
	data, err := proto.Marshal(cmd)
	if err != nil {
		return state.Result{}, fmt.Errorf("encode command: %w", err)
	}
	wait, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	for {
		res, err := m.forwardOnce(ctx, st, data)
		if !errors.Is(err, errNotPrimary) {
			return res, err
		}
		// No primary yet, or it moved before it proposed the command
		// (nothing was written): wait for the next one.
		select {
		case <-wait.Done():
			if ctx.Err() != nil {
				return state.Result{}, apierr.New(apierr.DeadlineExceeded, "no primary to commit the write before the caller gave up")
			}
			return state.Result{}, apierr.Unavailablef("no primary could commit the write within %s (is a quorum of members up? see GetClusterStatus)", leaderWait)
		case <-time.After(25 * time.Millisecond):
		}
		if st.IsLeader() {
			return m.applyAsPrimary(ctx, st, cmd)
		}
	}
}

// applyAsPrimary proposes a command on this member as the primary, once
// its term is confirmed.
func (m *Member) applyAsPrimary(ctx context.Context, st *store.Store, cmd *storev1.Command) (state.Result, error) {
	if err := m.awaitPrimaryReady(ctx, st); err != nil {
		return state.Result{}, err
	}
	start := time.Now()
	res, err := st.Apply(ctx, cmd)
	if (err == nil || res.Index > 0) && m.cfg.ObserveCommit != nil {
		m.cfg.ObserveCommit(time.Since(start))
	}
	return res, err
}

// awaitPrimaryReady waits (up to leaderWait) until this member, the
// primary, has confirmed its term (Member.primaryReady: its first
// entry committed, so its commit index covers every write an earlier
// primary acknowledged, and no newer generation exists). A standalone
// member needs no confirmation.
func (m *Member) awaitPrimaryReady(ctx context.Context, st *store.Store) error {
	if !m.Clustered() || m.primaryReady.Load() {
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	for !m.primaryReady.Load() {
		if !st.IsLeader() {
			return apierr.Unavailablef("this member stopped being the primary before it could confirm its term; retry")
		}
		select {
		case <-wait.Done():
			return apierr.Unavailablef("the primary is still taking over; retry")
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// forwardOnce sends one command to the primary this member knows of.
// errNotPrimary: there is none, or it refused before proposing.
func (m *Member) forwardOnce(ctx context.Context, st *store.Store, data []byte) (state.Result, error) {
	leader, _ := st.Leader()
	if leader == "" || leader == m.cfg.Name {
		return state.Result{}, errNotPrimary
	}
	url := m.MemberAPI(leader)
	if url == "" {
		return state.Result{}, apierr.Unavailablef("the primary %s has no known API URL", leader)
	}
	fctx, sent, done := WatchLeader(ctx, st, leader)
	resp, err := m.memberClient(url).Forward(fctx, newMemberRequest(m, &managerv1.ForwardRequest{Command: data}))
	moved := done()
	if err != nil {
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			return state.Result{}, errNotPrimary
		}
		if moved {
			if !sent.Load() {
				// Lost while dialling it (a dead host answers nothing):
				// nothing was sent; try the next primary.
				return state.Result{}, errNotPrimary
			}
			return state.Result{}, apierr.Unavailablef("the primary %s was lost while the write was in flight; it may or may not have been applied", leader)
		}
		if IsDialErr(err) {
			// The request never reached it (refused, or the dial timed
			// out): nothing was written.
			return state.Result{}, errNotPrimary
		}
		return state.Result{}, apierr.Unavailablef("forwarding the write to the primary %s failed (%v); it may or may not have been applied", leader, err)
	}
	fw := resp.Msg
	res := state.Result{Index: fw.GetIndex()}
	if fw.GetErrorCode() != "" {
		return res, &apierr.Error{Code: apierr.ParseCode(fw.GetErrorCode()), Msg: fw.GetError()}
	}
	if v := fw.GetValue(); v != nil {
		val, err := v.UnmarshalNew()
		if err != nil {
			return res, fmt.Errorf("decode the primary's answer: %w", err)
		}
		res.Value = FromForwarded(val)
	}
	if err := st.WaitApplied(ctx, res.Index); err != nil {
		return res, err
	}
	return res, nil
}

// Linearize waits until this member has applied everything the primary had
// committed when it was called, the primary having confirmed it still
// leads (raft's read index).
func (m *Member) Linearize(ctx context.Context) error {
	st := m.Store()
	if st == nil {
		return apierr.Unavailablef("the store is being replaced (a recovery); retry")
	}
	var index uint64
	if st.IsLeader() {
		if err := m.awaitPrimaryReady(ctx, st); err != nil {
			return err
		}
		if err := st.VerifyLeader(); err != nil {
			return err
		}
		index = st.CommitIndex()
	} else {
		leader, _ := st.Leader()
		if leader == "" {
			return apierr.Unavailablef("no primary to confirm a linearizable read; retry, or read without %s", ConsistencyHeader)
		}
		resp, err := m.memberClient(m.MemberAPI(leader)).ReadIndex(ctx, newMemberRequest(m, &managerv1.ReadIndexRequest{}))
		if err != nil {
			return apierr.Unavailablef("the primary %s could not confirm a linearizable read: %v", leader, err)
		}
		index = resp.Msg.GetIndex()
	}
	return st.WaitApplied(ctx, index)
}

// ConsistencyInterceptor serves a linearizable read (Linearize) when the
// call asks (ConsistencyHeader).
func (m *Member) ConsistencyInterceptor() connect.Interceptor { return consistencyInterceptor{m} }

type consistencyInterceptor struct{ m *Member }

func wantsLinearizable(h http.Header) bool { return h.Get(ConsistencyHeader) == "linearizable" }

func (i consistencyInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if wantsLinearizable(req.Header()) {
			if err := i.m.Linearize(ctx); err != nil {
				return nil, rpcerr.ToConnect(err)
			}
		}
		return next(ctx, req)
	}
}

func (i consistencyInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i consistencyInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if wantsLinearizable(conn.RequestHeader()) {
			if err := i.m.Linearize(ctx); err != nil {
				return rpcerr.ToConnect(err)
			}
		}
		return next(ctx, conn)
	}
}
