package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/cluster"
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

// apply commits a stamped command: on the primary directly; on a follower
// by forwarding it to the primary, then waiting until this member has
// applied it (so the caller reads its own write here).
func (s *Server) apply(ctx context.Context, cmd *storev1.Command) (state.Result, error) {
	st := s.st()
	if st == nil {
		return state.Result{}, apierr.Unavailablef("the store is being replaced (a recovery); retry")
	}
	if !s.cfg.clustered() || st.IsLeader() {
		return s.applyAsPrimary(ctx, st, cmd)
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
		res, err := s.forwardOnce(ctx, st, data)
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
			return s.applyAsPrimary(ctx, st, cmd)
		}
	}
}

// applyAsPrimary proposes a command on this member as the primary, once
// its term is confirmed.
func (s *Server) applyAsPrimary(ctx context.Context, st *store.Store, cmd *storev1.Command) (state.Result, error) {
	if err := s.awaitPrimaryReady(ctx, st); err != nil {
		return state.Result{}, err
	}
	start := time.Now()
	res, err := st.Apply(ctx, cmd)
	if err == nil || res.Index > 0 {
		s.metrics.commitSeconds.Observe(time.Since(start).Seconds())
	}
	return res, err
}

// awaitPrimaryReady waits (up to leaderWait) until this member, the
// primary, has confirmed its term (memberState.primaryReady: its first
// entry committed, so its commit index covers every write an earlier
// primary acknowledged, and no newer generation exists). A standalone
// member needs no confirmation.
func (s *Server) awaitPrimaryReady(ctx context.Context, st *store.Store) error {
	if !s.cfg.clustered() || s.member.primaryReady.Load() {
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	for !s.member.primaryReady.Load() {
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
func (s *Server) forwardOnce(ctx context.Context, st *store.Store, data []byte) (state.Result, error) {
	leader, _ := st.Leader()
	if leader == "" || leader == s.cfg.NodeName {
		return state.Result{}, errNotPrimary
	}
	url := s.memberAPI(leader)
	if url == "" {
		return state.Result{}, apierr.Unavailablef("the primary %s has no known API URL", leader)
	}
	fctx, sent, done := cluster.WatchLeader(ctx, st, leader)
	resp, err := s.memberClient(url).Forward(fctx, newMemberRequest(s, &managerv1.ForwardRequest{Command: data}))
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
		if cluster.IsDialErr(err) {
			// The request never reached it (refused, or the dial timed
			// out): nothing was written.
			return state.Result{}, errNotPrimary
		}
		return state.Result{}, apierr.Unavailablef("forwarding the write to the primary %s failed (%v); it may or may not have been applied", leader, err)
	}
	m := resp.Msg
	res := state.Result{Index: m.GetIndex()}
	if m.GetErrorCode() != "" {
		return res, &apierr.Error{Code: apierr.ParseCode(m.GetErrorCode()), Msg: m.GetError()}
	}
	if v := m.GetValue(); v != nil {
		val, err := v.UnmarshalNew()
		if err != nil {
			return res, fmt.Errorf("decode the primary's answer: %w", err)
		}
		res.Value = cluster.FromForwarded(val)
	}
	if err := st.WaitApplied(ctx, res.Index); err != nil {
		return res, err
	}
	return res, nil
}

// memberAPI is the API URL of member name ("" if unknown).
func (s *Server) memberAPI(name string) string {
	if st := s.st(); st != nil {
		if mr := st.State().Snapshot().Member(name); mr != nil && mr.GetApiUrl() != "" {
			return mr.GetApiUrl()
		}
	}
	if n, ok := s.cfg.clusterNode(name); ok {
		return n.API
	}
	return ""
}

// memberClients caches a Members client per URL.
type memberClients struct {
	once         sync.Once
	hc           *http.Client
	mu           sync.Mutex
	byURL        map[string]managerv1connect.MembersClient
	managerByURL map[string]managerv1connect.ManagerClient
}

// memberClient is the Members client for a member's API URL.
func (s *Server) memberClient(url string) managerv1connect.MembersClient {
	mc := &s.members
	mc.once.Do(func() {
		mc.hc = s.cfg.MemberHTTPClient
		if mc.hc == nil {
			mc.hc = cluster.HTTPClient(s.tls.caCert())
		}
		mc.byURL = map[string]managerv1connect.MembersClient{}
	})
	mc.mu.Lock()
	defer mc.mu.Unlock()
	c, ok := mc.byURL[url]
	if !ok {
		c = managerv1connect.NewMembersClient(mc.hc, url, connect.WithGRPC())
		mc.byURL[url] = c
	}
	return c
}

// newMemberRequest is a Members call carrying the cluster secret.
func newMemberRequest[T any](s *Server, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set(auth.AuthorizationHeader, auth.BearerPrefix+auth.ClusterSecretPrefix+s.cfg.ClusterSecret)
	return req
}

// linearize waits until this member has applied everything the primary had
// committed when it was called, the primary having confirmed it still
// leads (raft's read index).
func (s *Server) linearize(ctx context.Context) error {
	st := s.st()
	if st == nil {
		return apierr.Unavailablef("the store is being replaced (a recovery); retry")
	}
	var index uint64
	if st.IsLeader() {
		if err := s.awaitPrimaryReady(ctx, st); err != nil {
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
		resp, err := s.memberClient(s.memberAPI(leader)).ReadIndex(ctx, newMemberRequest(s, &managerv1.ReadIndexRequest{}))
		if err != nil {
			return apierr.Unavailablef("the primary %s could not confirm a linearizable read: %v", leader, err)
		}
		index = resp.Msg.GetIndex()
	}
	return st.WaitApplied(ctx, index)
}

// consistencyInterceptor serves a linearizable read when the call asks.
func (s *Server) consistencyInterceptor() connect.Interceptor { return consistencyInterceptor{s} }

type consistencyInterceptor struct{ s *Server }

func wantsLinearizable(h http.Header) bool { return h.Get(ConsistencyHeader) == "linearizable" }

func (i consistencyInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if wantsLinearizable(req.Header()) {
			if err := i.s.linearize(ctx); err != nil {
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
			if err := i.s.linearize(ctx); err != nil {
				return rpcerr.ToConnect(err)
			}
		}
		return next(ctx, conn)
	}
}

// membersHandler serves the Members service: the members' own calls.
type membersHandler struct{ s *Server }

var _ managerv1connect.MembersHandler = (*membersHandler)(nil)

func notPrimary(st *store.Store) error {
	leader, _ := st.Leader()
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%w (the primary is %s)", errNotPrimary, orNone(leader)))
}

// Forward applies a follower's command on the primary. A domain refusal is
// in the answer (error_code); a call error means nothing was proposed
// (FAILED_PRECONDITION: not the primary) or the transport failed.
func (h *membersHandler) Forward(ctx context.Context, req *connect.Request[managerv1.ForwardRequest]) (*connect.Response[managerv1.ForwardResponse], error) {
	st := h.s.st()
	if st == nil || !st.IsLeader() {
		if st == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errNotPrimary)
		}
		return nil, notPrimary(st)
	}
	cmd := &storev1.Command{}
	if err := proto.Unmarshal(req.Msg.GetCommand(), cmd); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("decode the forwarded command: %w", err))
	}
	if err := h.s.awaitPrimaryReady(ctx, st); err != nil {
		// Nothing was proposed: the follower tries the next primary.
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%w: %v", errNotPrimary, err))
	}
	res, err := h.s.applyAsPrimary(ctx, st, cmd)
	// The follower waits to apply the write before it answers: tell it
	// the commit now.
	st.Nudge()
	out := &managerv1.ForwardResponse{Index: res.Index}
	if err != nil {
		out.ErrorCode = apierr.CodeOf(err).String()
		out.Error = err.Error()
		return connect.NewResponse(out), nil
	}
	if res.Value != nil {
		// The write is applied: whatever happens now, say so with its
		// index, never as a call error the follower would report as
		// "maybe applied".
		m, ok := cluster.ForwardedValue(res.Value)
		if !ok {
			h.s.log.Error("a forwarded command's answer has no wire form; the follower gets the index only", "type", fmt.Sprintf("%T", res.Value))
			return connect.NewResponse(out), nil
		}
		v, err := anypb.New(m)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("encode the answer: %w", err))
		}
		out.Value = v
	}
	return connect.NewResponse(out), nil
}

// ReadIndex confirms this member leads and returns its commit index.
func (h *membersHandler) ReadIndex(ctx context.Context, req *connect.Request[managerv1.ReadIndexRequest]) (*connect.Response[managerv1.ReadIndexResponse], error) {
	st := h.s.st()
	if st == nil || !st.IsLeader() {
		if st == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errNotPrimary)
		}
		return nil, notPrimary(st)
	}
	if err := h.s.awaitPrimaryReady(ctx, st); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := st.VerifyLeader(); err != nil {
		return nil, notPrimary(st)
	}
	return connect.NewResponse(&managerv1.ReadIndexResponse{Index: st.CommitIndex()}), nil
}
