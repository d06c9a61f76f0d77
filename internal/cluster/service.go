package cluster

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// MemberStatus is this member's own view of itself.
func (h *membersHandler) MemberStatus(ctx context.Context, req *connect.Request[managerv1.MemberStatusRequest]) (*connect.Response[managerv1.MemberStatusResponse], error) {
	return connect.NewResponse(h.m.localStatus()), nil
}

// Join, on the primary, adds a member the cluster expects to the raft
// configuration; another member passes it to the primary.
func (h *membersHandler) Join(ctx context.Context, req *connect.Request[managerv1.JoinRequest]) (*connect.Response[managerv1.JoinResponse], error) {
	m, j := h.m, req.Msg
	if err := jobspec.ValidateID("name", j.GetName()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if j.GetRaftAddress() == "" {
		return nil, rpcerr.ToConnect(apierr.Invalid("raftAddress", "must not be empty"))
	}
	st := m.Store()
	if st == nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("this member's store is being replaced"))
	}
	if !st.IsLeader() {
		leader, _ := st.Leader()
		if leader == "" || leader == m.cfg.Name {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("no primary to add %s", j.GetName()))
		}
		return m.memberClient(m.MemberAPI(leader)).Join(ctx, newMemberRequest(m, j))
	}
	r := st.State().Snapshot()
	rec := r.Member(j.GetName())
	if rec == nil || rec.GetStatus() == state.MemberRetired {
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("%s is not expected by this cluster: add it first (norsk-ctl cluster add %s)", j.GetName(), j.GetName()))
	}
	if rec.GetWitness() != j.GetWitness() {
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("%s is expected as a %s but started as a %s", j.GetName(), witnessOrMember(rec.GetWitness()), witnessOrMember(j.GetWitness())))
	}
	// A member that is not a voter yet catches up first: it becomes one
	// (promoteCaughtUp) once it holds the log, so a slow joiner never
	// costs the cluster its quorum.
	conf, err := st.Configuration()
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if slices.ContainsFunc(conf, func(sv raft.Server) bool { return string(sv.ID) == j.GetName() && sv.Suffrage == raft.Voter }) {
		err = st.AddVoter(j.GetName(), j.GetRaftAddress())
	} else {
		err = st.AddNonvoter(j.GetName(), j.GetRaftAddress())
	}
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if rec.GetStatus() != state.MemberJoined || rec.GetRaftAddress() != j.GetRaftAddress() || rec.GetApiUrl() != j.GetApiUrl() {
		if _, err := st.Apply(ctx, &storev1.Command{
			Time:  timestamppb.New(m.cfg.Clock.Now()),
			Audit: &storev1.AuditStamp{Who: "member:" + j.GetName(), Method: "Join", Target: "member/" + j.GetName(), Source: "manager"},
			Cmd: &storev1.Command_MemberJoined{MemberJoined: &storev1.MemberJoined{
				Name: j.GetName(), RaftAddress: j.GetRaftAddress(), ApiUrl: j.GetApiUrl(), Witness: j.GetWitness(),
			}},
		}); err != nil {
			return nil, rpcerr.ToConnect(err)
		}
		m.events.Record("member-joined", fmt.Sprintf("%s %s joined (raft %s, API %s)", witnessOrMember(j.GetWitness()), j.GetName(), j.GetRaftAddress(), j.GetApiUrl()),
			st.Term(), r.Generation())
	}
	return connect.NewResponse(&managerv1.JoinResponse{Generation: r.Generation()}), nil
}

// membersHandler serves the Members service: the members' own calls.
type membersHandler struct{ m *Member }

var _ managerv1connect.MembersHandler = (*membersHandler)(nil)

// primaryStore is this member's store while it leads; otherwise the
// refusal a Members call gets (FAILED_PRECONDITION, naming the primary).
func (m *Member) primaryStore() (*store.Store, error) {
	st := m.Store()
	if st == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errNotPrimary)
	}
	if !st.IsLeader() {
		return nil, notPrimary(st)
	}
	return st, nil
}

func notPrimary(st *store.Store) error {
	leader, _ := st.Leader()
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%w (the primary is %s)", errNotPrimary, orNone(leader)))
}

// Forward applies a follower's command on the primary. A domain refusal is
// in the answer (error_code); a call error means nothing was proposed
// (FAILED_PRECONDITION: not the primary) or the transport failed.
func (h *membersHandler) Forward(ctx context.Context, req *connect.Request[managerv1.ForwardRequest]) (*connect.Response[managerv1.ForwardResponse], error) {
	st, err := h.m.primaryStore()
	if err != nil {
		return nil, err
	}
	cmd := &storev1.Command{}
	if err := proto.Unmarshal(req.Msg.GetCommand(), cmd); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("decode the forwarded command: %w", err))
	}
	if err := h.m.awaitPrimaryReady(ctx, st); err != nil {
		// Nothing was proposed: the follower tries the next primary.
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%w: %v", errNotPrimary, err))
	}
	res, err := h.m.applyAsPrimary(ctx, st, cmd)
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
		fv, ok := ForwardedValue(res.Value)
		if !ok {
			h.m.log.Error("a forwarded command's answer has no wire form; the follower gets the index only", "type", fmt.Sprintf("%T", res.Value))
			return connect.NewResponse(out), nil
		}
		v, err := anypb.New(fv)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("encode the answer: %w", err))
		}
		out.Value = v
	}
	return connect.NewResponse(out), nil
}

// ReadIndex confirms this member leads and returns its commit index.
func (h *membersHandler) ReadIndex(ctx context.Context, req *connect.Request[managerv1.ReadIndexRequest]) (*connect.Response[managerv1.ReadIndexResponse], error) {
	st, err := h.m.primaryStore()
	if err != nil {
		return nil, err
	}
	if err := h.m.awaitPrimaryReady(ctx, st); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := st.VerifyLeader(); err != nil {
		return nil, notPrimary(st)
	}
	return connect.NewResponse(&managerv1.ReadIndexResponse{Index: st.CommitIndex()}), nil
}

// Service is the Members service this member serves to the others.
func (m *Member) Service() managerv1connect.MembersHandler { return &membersHandler{m} }
