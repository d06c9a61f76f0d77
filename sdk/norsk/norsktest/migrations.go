package norsktest

import (
	"context"
	"sort"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// The fake's migration surface: the Manager's relays (recorded, see
// MigrationCalls), the migration records (kept as the store keeps them)
// and draining. The fake runs no AutoManager: MigrateJob, and the
// AbortMigration form that only names a migration, answer UNAVAILABLE as a
// Manager without one does.

// MigrationCall is one relay the fake was asked for.
type MigrationCall struct {
	Method      string
	Key         *managerv1.JobKey
	MigrationID string
	Payload     []byte
	Reason      string
}

// MigrationCalls returns the relays made so far, oldest first.
func (s *Server) MigrationCalls() []MigrationCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]MigrationCall(nil), s.migCalls...)
}

// liveInstance is the job's instance role when it has not stopped. s.mu held.
func (s *Server) liveInstance(jobID, role string) *managerv1.Instance {
	j, ok := s.jobs[jobID]
	if !ok {
		return nil
	}
	in := instance(j, role)
	if in == nil || in.Phase == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
		return nil
	}
	return in
}

func (s *Server) relay(method, field string, key *managerv1.JobKey, id string, payload []byte) (*connect.Response[managerv1.NotifyMigrationResponse], error) {
	if err := jobspec.ValidateMigrationRelay(field, key, id, payload); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.liveInstance(key.GetJobId(), key.GetRole())
	if in == nil {
		return nil, errorf(connect.CodeNotFound, "job %s has no live instance %s", key.GetJobId(), key.GetRole())
	}
	s.migCalls = append(s.migCalls, MigrationCall{Method: method, Key: key, MigrationID: id, Payload: payload})
	return connect.NewResponse(&managerv1.NotifyMigrationResponse{NodeId: in.NodeId}), nil
}

// NotifyMigrationGetState implements the Manager service.
func (s *Server) NotifyMigrationGetState(_ context.Context, req *connect.Request[managerv1.NotifyMigrationGetStateRequest]) (*connect.Response[managerv1.NotifyMigrationResponse], error) {
	return s.relay("NotifyMigrationGetState", "sourceJobKey", req.Msg.GetSourceJobKey(), req.Msg.GetMigrationId(), nil)
}

// NotifyMigrationCutoverReady implements the Manager service.
func (s *Server) NotifyMigrationCutoverReady(_ context.Context, req *connect.Request[managerv1.NotifyMigrationCutoverReadyRequest]) (*connect.Response[managerv1.NotifyMigrationResponse], error) {
	return s.relay("NotifyMigrationCutoverReady", "sourceJobKey", req.Msg.GetSourceJobKey(), req.Msg.GetMigrationId(), req.Msg.GetPayload())
}

// NotifyMigrationCutoverApply implements the Manager service.
func (s *Server) NotifyMigrationCutoverApply(_ context.Context, req *connect.Request[managerv1.NotifyMigrationCutoverApplyRequest]) (*connect.Response[managerv1.NotifyMigrationResponse], error) {
	return s.relay("NotifyMigrationCutoverApply", "targetJobKey", req.Msg.GetTargetJobKey(), req.Msg.GetMigrationId(), req.Msg.GetPayload())
}

// AbortMigration implements the Manager service.
func (s *Server) AbortMigration(_ context.Context, req *connect.Request[managerv1.AbortMigrationRequest]) (*connect.Response[managerv1.AbortMigrationResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateAbortMigration(m); err != nil {
		return nil, refuse(err)
	}
	if m.GetSourceRole() == "" && m.GetTargetRole() == "" {
		return nil, errorf(connect.CodeUnavailable, "no AutoManager runs on this (fake) Manager")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &managerv1.AbortMigrationResponse{}
	for _, role := range []string{m.GetSourceRole(), m.GetTargetRole()} {
		if in := s.liveInstance(m.GetJobId(), role); in != nil {
			out.NodeIds = append(out.NodeIds, in.NodeId)
			s.migCalls = append(s.migCalls, MigrationCall{Method: "AbortMigration", Key: &managerv1.JobKey{JobId: m.GetJobId(), Role: role}, MigrationID: m.GetMigrationId(), Reason: m.GetReason()})
		}
	}
	if len(out.NodeIds) == 0 {
		return nil, errorf(connect.CodeNotFound, "job %s has no live instance %s or %s", m.GetJobId(), m.GetSourceRole(), m.GetTargetRole())
	}
	return connect.NewResponse(out), nil
}

// MigrateJob implements the Manager service: the fake runs no AutoManager.
func (s *Server) MigrateJob(context.Context, *connect.Request[managerv1.MigrateJobRequest]) (*connect.Response[managerv1.MigrateJobResponse], error) {
	return nil, errorf(connect.CodeUnavailable, "no AutoManager runs on this (fake) Manager")
}

func migrationTerminal(p managerv1.MigrationPhase) bool {
	return p == managerv1.MigrationPhase_MIGRATION_PHASE_DONE || p == managerv1.MigrationPhase_MIGRATION_PHASE_ABORTED
}

// migrationsOf is every record (of jobID, "" = all), newest first. s.mu held.
func (s *Server) migrationsOf(jobID string) []*managerv1.MigrationState {
	var out []*managerv1.MigrationState
	for _, m := range s.migrations {
		if jobID == "" || m.GetSourceJobId() == jobID {
			out = append(out, proto.Clone(m).(*managerv1.MigrationState))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].GetStartedAt().AsTime(), out[j].GetStartedAt().AsTime()
		if !a.Equal(b) {
			return a.After(b)
		}
		return out[i].GetMigrationId() < out[j].GetMigrationId()
	})
	return out
}

// ListMigrations implements the Manager service.
func (s *Server) ListMigrations(_ context.Context, req *connect.Request[managerv1.ListMigrationsRequest]) (*connect.Response[managerv1.ListMigrationsResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return connect.NewResponse(&managerv1.ListMigrationsResponse{Migrations: s.migrationsOf(req.Msg.GetJobId())}), nil
}

// GetMigration implements the Manager service.
func (s *Server) GetMigration(_ context.Context, req *connect.Request[managerv1.GetMigrationRequest]) (*connect.Response[managerv1.MigrationState], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.migrations[req.Msg.GetMigrationId()]
	if !ok {
		return nil, errorf(connect.CodeNotFound, "no migration %q", req.Msg.GetMigrationId())
	}
	return connect.NewResponse(proto.Clone(m).(*managerv1.MigrationState)), nil
}

// MigrationForJob implements the Manager service.
func (s *Server) MigrationForJob(_ context.Context, req *connect.Request[managerv1.MigrationForJobRequest]) (*connect.Response[managerv1.MigrationState], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.jobs[req.Msg.GetJobId()]; !ok {
		return nil, errorf(connect.CodeNotFound, "no job %q", req.Msg.GetJobId())
	}
	for _, m := range s.migrationsOf(req.Msg.GetJobId()) {
		if !migrationTerminal(m.GetPhase()) {
			return connect.NewResponse(m), nil
		}
	}
	return nil, errorf(connect.CodeNotFound, "job %s has no migration in flight", req.Msg.GetJobId())
}

// ForgetMigration implements the Manager service.
func (s *Server) ForgetMigration(_ context.Context, req *connect.Request[managerv1.ForgetMigrationRequest]) (*connect.Response[managerv1.ForgetMigrationResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.migrations[req.Msg.GetMigrationId()]
	if !ok {
		return nil, errorf(connect.CodeNotFound, "no migration %s", req.Msg.GetMigrationId())
	}
	if !migrationTerminal(m.GetPhase()) {
		return nil, errorf(connect.CodeFailedPrecondition, "migration %s is still in flight: abort it first", m.GetMigrationId())
	}
	delete(s.migrations, m.GetMigrationId())
	s.emit(s.nextIndex(), &managerv1.Event{Kind: &managerv1.Event_MigrationForgotten{MigrationForgotten: &managerv1.MigrationForgotten{MigrationIds: []string{m.GetMigrationId()}}}})
	return connect.NewResponse(&managerv1.ForgetMigrationResponse{Forgotten: true}), nil
}

// ForgetTerminalMigrations implements the Manager service.
func (s *Server) ForgetTerminalMigrations(context.Context, *connect.Request[managerv1.ForgetTerminalMigrationsRequest]) (*connect.Response[managerv1.ForgetTerminalMigrationsResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &managerv1.ForgetTerminalMigrationsResponse{}
	for _, m := range s.migrationsOf("") {
		if migrationTerminal(m.GetPhase()) {
			delete(s.migrations, m.GetMigrationId())
			out.MigrationIds = append(out.MigrationIds, m.GetMigrationId())
		}
	}
	if len(out.MigrationIds) > 0 {
		s.emit(s.nextIndex(), &managerv1.Event{Kind: &managerv1.Event_MigrationForgotten{MigrationForgotten: &managerv1.MigrationForgotten{MigrationIds: out.MigrationIds}}})
	}
	return connect.NewResponse(out), nil
}

// RecordMigration implements the Manager service.
func (s *Server) RecordMigration(_ context.Context, req *connect.Request[managerv1.RecordMigrationRequest]) (*connect.Response[managerv1.RecordMigrationResponse], error) {
	m := req.Msg.GetMigration()
	if err := jobspec.ValidateMigration(m); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ex, exists := s.migrations[m.GetMigrationId()]
	switch {
	case req.Msg.GetCreate() && exists:
		return nil, errorf(connect.CodeAlreadyExists, "migration %s already exists", m.GetMigrationId())
	case !req.Msg.GetCreate() && !exists:
		return nil, errorf(connect.CodeFailedPrecondition, "migration %s is not recorded", m.GetMigrationId())
	case exists && req.Msg.GetExpectedRevision() != 0 && ex.GetRevision() != req.Msg.GetExpectedRevision():
		return nil, errorf(connect.CodeFailedPrecondition, "migration %s is at revision %d, not %d", m.GetMigrationId(), ex.GetRevision(), req.Msg.GetExpectedRevision())
	case exists && migrationTerminal(ex.GetPhase()) && ex.GetPhase() != m.GetPhase():
		return nil, errorf(connect.CodeFailedPrecondition, "migration %s has ended", m.GetMigrationId())
	}
	if !migrationTerminal(m.GetPhase()) {
		for _, o := range s.migrations {
			if o.GetSourceJobId() == m.GetSourceJobId() && o.GetMigrationId() != m.GetMigrationId() && !migrationTerminal(o.GetPhase()) {
				return nil, errorf(connect.CodeFailedPrecondition, "a migration is already in flight for job %s", m.GetSourceJobId())
			}
		}
	}
	i := s.nextIndex()
	n := proto.Clone(m).(*managerv1.MigrationState)
	n.Revision, n.UpdatedAt = i, timestamppb.New(s.now())
	if s.migrations == nil {
		s.migrations = map[string]*managerv1.MigrationState{}
	}
	s.migrations[n.GetMigrationId()] = n
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_MigrationUpdated{MigrationUpdated: proto.Clone(n).(*managerv1.MigrationState)}})
	return connect.NewResponse(&managerv1.RecordMigrationResponse{Revision: i}), nil
}

// SetNodeDraining implements the Manager service.
func (s *Server) SetNodeDraining(_ context.Context, req *connect.Request[managerv1.SetNodeDrainingRequest]) (*connect.Response[managerv1.SetNodeDrainingResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[req.Msg.GetNodeId()]
	if !ok {
		return nil, errorf(connect.CodeNotFound, "node %q not found", req.Msg.GetNodeId())
	}
	n.Draining = req.Msg.GetDraining()
	s.emit(s.nextIndex(), &managerv1.Event{Kind: &managerv1.Event_NodeTagsUpdated{NodeTagsUpdated: &managerv1.NodeEvent{Node: proto.Clone(n).(*managerv1.Node), Reason: "draining"}}})
	return connect.NewResponse(&managerv1.SetNodeDrainingResponse{Node: proto.Clone(n).(*managerv1.Node)}), nil
}

// DrainNode implements the Manager service: the drain is stored on the node
// as the Manager stores it (running, overlap and 2 at once by default, a
// deadline an hour on unless none). The fake runs no AutoManager, so a drain
// stays running until RecordNodeDrain moves it or undo cancels it.
func (s *Server) DrainNode(_ context.Context, req *connect.Request[managerv1.DrainNodeRequest]) (*connect.Response[managerv1.DrainNodeResponse], error) {
	m := req.Msg
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.requireNode(m.GetNodeId())
	if err != nil {
		return nil, err
	}
	if err := jobspec.ValidateDrainRequest(m); err != nil {
		return nil, refuse(err)
	}
	answer := func(attached bool) (*connect.Response[managerv1.DrainNodeResponse], error) {
		c := proto.Clone(n).(*managerv1.Node)
		return connect.NewResponse(&managerv1.DrainNodeResponse{Drain: c.GetDrain(), Attached: attached, Node: c}), nil
	}
	running := n.GetDrain().GetState() == managerv1.NodeDrainState_NODE_DRAIN_STATE_RUNNING
	if m.GetUndo() {
		n.Draining = false
		if running {
			n.Drain.State = managerv1.NodeDrainState_NODE_DRAIN_STATE_CANCELLED
			n.Drain.EndedAt = timestamppb.New(s.now())
			n.Drain.Revision = s.nextIndex()
			s.emit(n.Drain.Revision, &managerv1.Event{Kind: &managerv1.Event_NodeDrainUpdated{NodeDrainUpdated: proto.Clone(n.Drain).(*managerv1.NodeDrain)}})
		}
		return answer(false)
	}
	if running {
		return answer(true)
	}
	d := &managerv1.NodeDrain{NodeId: n.GetNodeId(), State: managerv1.NodeDrainState_NODE_DRAIN_STATE_RUNNING, Strategy: m.GetStrategy(),
		Parallel: m.GetParallel(), StartedAt: timestamppb.New(s.now())}
	if d.Strategy == managerv1.MigrationStrategy_MIGRATION_STRATEGY_UNSPECIFIED {
		d.Strategy = managerv1.MigrationStrategy_MIGRATION_STRATEGY_OVERLAP
	}
	if d.Parallel == 0 {
		d.Parallel = 2
	}
	if !m.GetNoDeadline() {
		dl := time.Hour
		if m.GetDeadlineMs() > 0 {
			dl = time.Duration(m.GetDeadlineMs()) * time.Millisecond
		}
		d.Deadline = timestamppb.New(s.now().Add(dl))
	}
	d.Revision = s.nextIndex()
	n.Draining, n.Drain = true, d
	s.emit(d.Revision, &managerv1.Event{Kind: &managerv1.Event_NodeDrainUpdated{NodeDrainUpdated: proto.Clone(d).(*managerv1.NodeDrain)}})
	return answer(false)
}

// RecordNodeDrain implements the Manager service (the store's revision and
// state checks).
func (s *Server) RecordNodeDrain(_ context.Context, req *connect.Request[managerv1.RecordNodeDrainRequest]) (*connect.Response[managerv1.RecordNodeDrainResponse], error) {
	d := req.Msg.GetDrain()
	if d == nil {
		return nil, invalid("drain", "is required")
	}
	if err := jobspec.ValidateDrain(d); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.requireNode(d.GetNodeId())
	switch {
	case err != nil:
		return nil, err
	case n.GetDrain().GetState() != managerv1.NodeDrainState_NODE_DRAIN_STATE_RUNNING:
		return nil, errorf(connect.CodeFailedPrecondition, "node %s has no running drain", d.GetNodeId())
	case req.Msg.GetExpectedRevision() != 0 && req.Msg.GetExpectedRevision() != n.GetDrain().GetRevision():
		return nil, errorf(connect.CodeFailedPrecondition, "node %s's drain is at revision %d, not %d", d.GetNodeId(), n.GetDrain().GetRevision(), req.Msg.GetExpectedRevision())
	}
	nd := proto.Clone(d).(*managerv1.NodeDrain)
	nd.Revision = s.nextIndex()
	if nd.GetState() != managerv1.NodeDrainState_NODE_DRAIN_STATE_RUNNING {
		nd.EndedAt = timestamppb.New(s.now())
	}
	n.Drain = nd
	s.emit(nd.Revision, &managerv1.Event{Kind: &managerv1.Event_NodeDrainUpdated{NodeDrainUpdated: proto.Clone(nd).(*managerv1.NodeDrain)}})
	return connect.NewResponse(&managerv1.RecordNodeDrainResponse{Revision: nd.Revision}), nil
}
