package norsktest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// The fake's bundles (AutoManager v1) and leases.
//
// A bundle is validated as the Manager validates it (names, unique job
// names, coLocateWith and separateFrom naming jobs of the bundle,
// requirements, resilience policy; INVALID_ARGUMENT names the field, e.g.
// "bundle.jobs[1].jobName") and expands, in the same write, into one job per
// replica and bundle job: id <bundleId>.<jobName>.<replicaIndex>, the
// template with the job's requirements as its autoPlacement, and the tags
// bundleId, replicaIndex, jobName and — for start mode manual — dormant. The
// fake has no configuration: a pool is known when some node carries it as
// its pool tag (AddNode with that tag, or a cluster slot's pool).
//
// The fake runs no AutoManager: bundle jobs are not placed by themselves
// (start them with StartJob, role primary, backup or replica-<n> as the
// replica's), and an update leaves the jobs whose template changed as they
// are (the AutoManager rolls them). Its simulated workers stop instances at
// once, so DeleteBundle marks the bundle deleting, stops its instances and
// removes its jobs and the bundle in one call, and a stop time already past
// deletes the bundle at once. ExpireBundles plays the AutoManager's sweep of
// stop times and bundle leases that have passed.
//
// Leases: PauseLeases and ResumeLeases keep the pause as the Manager does,
// and GetLeaseStatus reports one lease per instance of a lease-protected job
// that is not stopped. The simulated workers refresh continuously, so a
// lease held on an online node was refreshed just now; one on a node that is
// not online was last refreshed when the node left the online state (or at
// the last resume, if later) and expires a TTL after that, unless leases are
// paused.

// DefaultLeaseTTL is the lease TTL the fake reports, as the Manager's default.
const DefaultLeaseTTL = 15 * time.Second

// leaseState is whether leases are paused, and the TTL reported.
type leaseState struct {
	paused bool
	reason string
	by     string
	since  *timestamppb.Timestamp
	ttl    time.Duration
}

// SetLeaseTTL sets the lease TTL GetLeaseStatus reports (0 = DefaultLeaseTTL).
func (s *Server) SetLeaseTTL(ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases.ttl = ttl
}

func (s *Server) leaseTTL() time.Duration {
	if s.leases.ttl > 0 {
		return s.leases.ttl
	}
	return DefaultLeaseTTL
}

// Bundle returns a copy of the bundle id as the fake holds it, or nil.
func (s *Server) Bundle(id string) *managerv1.Bundle {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.bundles[id]; ok {
		return proto.Clone(b).(*managerv1.Bundle)
	}
	return nil
}

// ExpireBundles does what the AutoManager does when time passes: every live
// bundle whose stop time has come, or whose lease has run out, is deleted
// (as by DeleteBundle). It returns the ids of the bundles deleted, in id
// order. Move time with SetClock first.
func (s *Server) ExpireBundles() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var gone []string
	for _, id := range sortedIDs(s.bundles) {
		b := s.bundles[id]
		switch {
		case b.GetStopAt() != nil && !now.Before(b.GetStopAt().AsTime()):
			s.deleteBundle(b, "stop time reached")
		case b.GetLeaseExpiresAt() != nil && !now.Before(b.GetLeaseExpiresAt().AsTime()):
			s.deleteBundle(b, "lease expired")
		default:
			continue
		}
		gone = append(gone, id)
	}
	return gone
}

// invalid is an INVALID_ARGUMENT naming field, as the Manager words it.
func invalid(field, format string, args ...any) error {
	return refuse(apierr.Invalid(field, format, args...))
}

// bundleJobIDs are the ids of every replica job of b, replica by replica.
func bundleJobIDs(b *managerv1.Bundle) []string {
	var ids []string
	for r := range jobspec.Replicas(b) {
		for _, j := range b.GetJobs() {
			ids = append(ids, jobspec.BundleJobID(b.GetBundleId(), j.GetJobName(), r))
		}
	}
	return ids
}

// validateBundle checks a bundle as the Manager does before storing it
// (bundle_id set); the pools are checked by knownPools.
func validateBundle(b *managerv1.Bundle) error {
	if err := jobspec.ValidateBundle(b); err != nil {
		return refuse(err)
	}
	return refuse(jobspec.CheckBundleLimits(b))
}

// knownPools checks that the bundle's pools are pools of some node. Callers
// hold mu.
func (s *Server) knownPools(b *managerv1.Bundle) error {
	known := func(pool string) bool {
		if pool == "" {
			return true
		}
		for _, n := range s.nodes {
			if n.GetTags()["pool"] == pool {
				return true
			}
		}
		return false
	}
	if !known(b.GetPool()) {
		return invalid("bundle.pool", "%s is neither a pool of the Manager's configuration nor the pool of any node", apierr.Quote(b.GetPool()))
	}
	if p := b.GetResiliencePolicy(); p != nil && !known(p.GetPool()) {
		return invalid("bundle.resiliencePolicy.pool", "%s is neither a pool of the Manager's configuration nor the pool of any node", apierr.Quote(p.GetPool()))
	}
	return nil
}

// requireBundle checks an id and returns the bundle. Callers hold mu.
func (s *Server) requireBundle(id string) (*managerv1.Bundle, error) {
	if err := jobspec.ValidateBundleName("bundleId", id); err != nil {
		return nil, refuse(err)
	}
	b, ok := s.bundles[id]
	if !ok {
		return nil, errorf(connect.CodeNotFound, "no bundle %q", id)
	}
	return b, nil
}

// requireLive refuses a bundle being deleted.
func requireLive(b *managerv1.Bundle, what string) error {
	if b.GetState() != managerv1.BundleState_BUNDLE_STATE_LIVE {
		return errorf(connect.CodeFailedPrecondition, "bundle %q is being deleted%s", b.GetBundleId(), what)
	}
	return nil
}

// putBundle stores b at index i and emits ev (built from a copy of it).
// Callers hold mu.
func (s *Server) putBundle(b *managerv1.Bundle, i uint64, reason string, created bool) {
	b.Revision = i
	if s.bundles == nil {
		s.bundles = map[string]*managerv1.Bundle{}
	}
	s.bundles[b.GetBundleId()] = b
	ev := &managerv1.BundleEvent{Bundle: proto.Clone(b).(*managerv1.Bundle), Reason: reason}
	if created {
		s.emit(i, &managerv1.Event{Kind: &managerv1.Event_BundleCreated{BundleCreated: ev}})
		return
	}
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_BundleUpdated{BundleUpdated: ev}})
}

// stopJobInstances stops every instance of job id not already told to stop.
// Callers hold mu.
func (s *Server) stopJobInstances(id, detail string, graceMs uint32) {
	j, ok := s.jobs[id]
	if !ok {
		return
	}
	for _, in := range j.Instances {
		if in.Desired != managerv1.InstanceDesired_INSTANCE_DESIRED_STOPPED && in.Phase != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
			in.StopGraceMs = graceMs
			s.stopInstance(j, in, managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED, detail, 0)
		}
	}
}

// deleteBundle deletes a bundle as the Manager and its AutoManager do: mark
// it deleting, stop its instances (at once, here), then remove its jobs and
// itself. Callers hold mu.
func (s *Server) deleteBundle(b *managerv1.Bundle, reason string) {
	if b.GetState() == managerv1.BundleState_BUNDLE_STATE_LIVE {
		nb := proto.Clone(b).(*managerv1.Bundle)
		nb.State = managerv1.BundleState_BUNDLE_STATE_DELETING
		nb.DeletingReason = reason
		s.putBundle(nb, s.nextIndex(), "deleting: "+reason, false)
		b = nb
		for _, id := range bundleJobIDs(b) {
			s.stopJobInstances(id, "bundle deleted: "+reason, 0)
		}
	}
	i := s.nextIndex()
	for _, id := range bundleJobIDs(b) {
		if _, ok := s.jobs[id]; ok {
			s.removeJob(id, i)
		}
	}
	delete(s.bundles, b.GetBundleId())
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_BundleDeleted{BundleDeleted: &managerv1.BundleDeleted{BundleId: b.GetBundleId(), Reason: b.GetDeletingReason()}}})
}

// bundleView is b with each of its replica jobs and where it runs. Callers
// hold mu.
func (s *Server) bundleView(b *managerv1.Bundle) *managerv1.BundleWithJobs {
	out := &managerv1.BundleWithJobs{Bundle: proto.Clone(b).(*managerv1.Bundle)}
	for r := range jobspec.Replicas(b) {
		for _, spec := range b.GetJobs() {
			id := jobspec.BundleJobID(b.GetBundleId(), spec.GetJobName(), r)
			st := &managerv1.BundleJobStatus{JobId: id, JobName: spec.GetJobName(), ReplicaIndex: uint32(r), Role: jobspec.ReplicaRole(r)}
			if j, ok := s.jobs[id]; ok {
				st.Dormant = j.GetJob().GetTags()[jobspec.TagDormant] == "true"
				if ts := j.GetJob().GetTerminalState(); ts != nil {
					st.TerminalState = proto.Clone(ts).(*managerv1.TerminalState)
				}
				in := instance(j, st.Role)
				if in != nil {
					st.NodeId = in.GetNodeId()
					st.Phase = in.GetPhase()
					for _, d := range in.GetPlacement().GetDegradations() {
						st.Degradations = append(st.Degradations, d.GetRule()+": "+d.GetReason())
					}
				}
				for _, m := range s.migrationsOf(id) {
					if m.GetRepair() && !migrationTerminal(m.GetPhase()) {
						st.Degradations = append(st.Degradations, fmt.Sprintf("repair: %s (migration %s to %s, %s)",
							m.GetReason(), m.GetMigrationId(), m.GetTargetNodeId(), phaseWord(m.GetPhase())))
					}
				}
				if st.TerminalState == nil && !st.Dormant && (in == nil || in.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED) {
					nodes := make([]*managerv1.Node, 0, len(s.nodes))
					for _, n := range s.nodes {
						nodes = append(nodes, n)
					}
					if why := placement.RuntimeMismatch(nodes, j.GetJob()); why != "" {
						st.Degradations = append(st.Degradations, string(placement.RuleRuntime)+": "+why)
					}
				}
			}
			out.Jobs = append(out.Jobs, st)
		}
	}
	return out
}

// CreateBundle implements the Manager service.
func (s *Server) CreateBundle(_ context.Context, req *connect.Request[managerv1.CreateBundleRequest]) (*connect.Response[managerv1.CreateBundleResponse], error) {
	if req.Msg.GetBundle() == nil {
		return nil, invalid("bundle", "is required")
	}
	b := proto.Clone(req.Msg.GetBundle()).(*managerv1.Bundle)
	if b.GetBundleId() == "" {
		b.BundleId = "b-" + randHex(5)
	}
	if err := validateBundle(b); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.knownPools(b); err != nil {
		return nil, err
	}
	if _, ok := s.bundles[b.GetBundleId()]; ok {
		return nil, errorf(connect.CodeAlreadyExists, "bundle %q already exists", b.GetBundleId())
	}
	for _, id := range bundleJobIDs(b) {
		if _, ok := s.jobs[id]; ok {
			return nil, errorf(connect.CodeAlreadyExists, "job %q (of bundle %q) already exists", id, b.GetBundleId())
		}
	}
	b.State, b.StopAt, b.LeaseExpiresAt, b.DeletingReason = managerv1.BundleState_BUNDLE_STATE_LIVE, nil, nil, ""
	b.CreatedAt = timestamppb.New(s.now())
	// One write: the jobs, then the bundle, at one index.
	i := s.nextIndex()
	for r := range jobspec.Replicas(b) {
		for k := range b.GetJobs() {
			s.addJob(jobspec.ExpandBundleJob(b, k, r), i)
		}
	}
	s.putBundle(b, i, "created", true)
	return connect.NewResponse(&managerv1.CreateBundleResponse{BundleId: b.GetBundleId()}), nil
}

// UpdateBundle implements the Manager service.
func (s *Server) UpdateBundle(_ context.Context, req *connect.Request[managerv1.UpdateBundleRequest]) (*connect.Response[managerv1.UpdateBundleResponse], error) {
	if req.Msg.GetBundle() == nil {
		return nil, invalid("bundle", "is required")
	}
	nb := proto.Clone(req.Msg.GetBundle()).(*managerv1.Bundle)
	if err := validateBundle(nb); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.knownPools(nb); err != nil {
		return nil, err
	}
	old, ok := s.bundles[nb.GetBundleId()]
	if !ok {
		return nil, errorf(connect.CodeNotFound, "no bundle %q", nb.GetBundleId())
	}
	if err := requireLive(old, "; it cannot be updated"); err != nil {
		return nil, err
	}
	if nb.GetRevision() != 0 && nb.GetRevision() != old.GetRevision() {
		return nil, errorf(connect.CodeFailedPrecondition, "bundle %q has changed: the update is against revision %d, the bundle is at revision %d; read it again and retry",
			nb.GetBundleId(), nb.GetRevision(), old.GetRevision())
	}
	keep := map[string]bool{}
	for _, id := range bundleJobIDs(nb) {
		keep[id] = true
	}
	var drop []string
	for _, id := range bundleJobIDs(old) {
		if _, ok := s.jobs[id]; ok && !keep[id] {
			s.stopJobInstances(id, "job deleted", 0)
			drop = append(drop, id)
		}
	}
	i := s.nextIndex()
	for _, id := range drop {
		s.removeJob(id, i)
	}
	for r := range jobspec.Replicas(nb) {
		for k := range nb.GetJobs() {
			if job := jobspec.ExpandBundleJob(nb, k, r); s.jobs[job.GetJobId()] == nil {
				s.addJob(job, i)
			}
		}
	}
	nb.State, nb.CreatedAt, nb.DeletingReason = old.GetState(), old.GetCreatedAt(), ""
	nb.StopAt, nb.LeaseExpiresAt = old.GetStopAt(), old.GetLeaseExpiresAt()
	s.putBundle(nb, i, "updated", false)
	return connect.NewResponse(&managerv1.UpdateBundleResponse{Revision: i}), nil
}

// DeleteBundle implements the Manager service.
func (s *Server) DeleteBundle(_ context.Context, req *connect.Request[managerv1.DeleteBundleRequest]) (*connect.Response[managerv1.DeleteBundleResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.requireBundle(req.Msg.GetBundleId())
	if err != nil {
		return nil, err
	}
	s.deleteBundle(b, "deleted by DeleteBundle")
	return connect.NewResponse(&managerv1.DeleteBundleResponse{}), nil
}

// BundleById implements the Manager service.
func (s *Server) BundleById(_ context.Context, req *connect.Request[managerv1.BundleByIdRequest]) (*connect.Response[managerv1.BundleWithJobs], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.requireBundle(req.Msg.GetBundleId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(s.bundleView(b)), nil
}

// ListBundles implements the Manager service.
func (s *Server) ListBundles(context.Context, *connect.Request[managerv1.ListBundlesRequest]) (*connect.Response[managerv1.ListBundlesResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &managerv1.ListBundlesResponse{}
	for _, id := range sortedIDs(s.bundles) {
		out.Bundles = append(out.Bundles, s.bundleView(s.bundles[id]))
	}
	return connect.NewResponse(out), nil
}

// setDormant marks a replica job of a live bundle dormant (stopping its
// instances with the grace given) or clears the mark; either is
// idempotent. Callers hold mu.
func (s *Server) setDormant(bundleID string, replica uint32, jobName string, dormant bool, graceMs uint32) error {
	b, err := s.requireBundle(bundleID)
	if err != nil {
		return err
	}
	if err := requireLive(b, ""); err != nil {
		return err
	}
	if n := jobspec.Replicas(b); int(replica) >= n {
		return invalid("replicaIndex", "bundle %q has %d replica(s); %d is not one", bundleID, n, replica)
	}
	found := false
	for _, j := range b.GetJobs() {
		found = found || j.GetJobName() == jobName
	}
	if !found {
		return invalid("jobName", "bundle %q has no job %q", bundleID, jobName)
	}
	id := jobspec.BundleJobID(bundleID, jobName, int(replica))
	j, ok := s.jobs[id]
	if !ok {
		return errorf(connect.CodeNotFound, "job %q not found", id)
	}
	if dormant {
		s.stopJobInstances(id, "stopped by StopBundleJob", graceMs)
	}
	if (j.Job.Tags[jobspec.TagDormant] == "true") == dormant {
		return nil
	}
	i := s.nextIndex()
	prev := j.Job.CurrentHash
	j.Job = proto.Clone(j.Job).(*managerv1.Job)
	if j.Job.Tags == nil {
		j.Job.Tags = map[string]string{}
	}
	if dormant {
		j.Job.Tags[jobspec.TagDormant] = "true"
	} else {
		delete(j.Job.Tags, jobspec.TagDormant)
	}
	j.Job.CurrentHash = i
	s.jobUpdated(j, i, &managerv1.JobHistoryEntry{Event: &managerv1.JobHistoryEntry_Updated{Updated: &managerv1.JobUpdated{PreviousHash: prev, Hash: i}}})
	return nil
}

// StartBundleJob implements the Manager service.
func (s *Server) StartBundleJob(_ context.Context, req *connect.Request[managerv1.StartBundleJobRequest]) (*connect.Response[managerv1.StartBundleJobResponse], error) {
	m := req.Msg
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.setDormant(m.GetBundleId(), m.GetReplicaIndex(), m.GetJobName(), false, 0); err != nil {
		return nil, err
	}
	return connect.NewResponse(&managerv1.StartBundleJobResponse{}), nil
}

// StopBundleJob implements the Manager service.
func (s *Server) StopBundleJob(_ context.Context, req *connect.Request[managerv1.StopBundleJobRequest]) (*connect.Response[managerv1.StopBundleJobResponse], error) {
	m := req.Msg
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.requireBundle(m.GetBundleId()); err != nil {
		return nil, err
	}
	if err := jobspec.ValidateGrace("graceMs", m.GetGraceMs()); err != nil {
		return nil, refuse(err)
	}
	if err := s.setDormant(m.GetBundleId(), m.GetReplicaIndex(), m.GetJobName(), true, m.GetGraceMs()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&managerv1.StopBundleJobResponse{}), nil
}

// SetBundleStopTime implements the Manager service.
func (s *Server) SetBundleStopTime(_ context.Context, req *connect.Request[managerv1.SetBundleStopTimeRequest]) (*connect.Response[managerv1.SetBundleStopTimeResponse], error) {
	m := req.Msg
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.requireBundle(m.GetBundleId())
	if err != nil {
		return nil, err
	}
	if m.StopAt != nil {
		if err := m.GetStopAt().CheckValid(); err != nil {
			return nil, invalid("stopAt", "%v", err)
		}
	}
	if err := requireLive(b, ""); err != nil {
		return nil, err
	}
	nb := proto.Clone(b).(*managerv1.Bundle)
	nb.StopAt = m.GetStopAt()
	reason := "stop time cleared"
	if nb.StopAt != nil {
		reason = "stop time set"
	}
	s.putBundle(nb, s.nextIndex(), reason, false)
	if nb.StopAt != nil && !s.now().Before(nb.GetStopAt().AsTime()) {
		s.deleteBundle(nb, "stop time reached")
	}
	return connect.NewResponse(&managerv1.SetBundleStopTimeResponse{}), nil
}

// RenewBundleLease implements the Manager service.
func (s *Server) RenewBundleLease(_ context.Context, req *connect.Request[managerv1.RenewBundleLeaseRequest]) (*connect.Response[managerv1.RenewBundleLeaseResponse], error) {
	m := req.Msg
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.requireBundle(m.GetBundleId())
	if err != nil {
		return nil, err
	}
	if err := jobspec.ValidateLeaseTTL(m.GetTtlMs()); err != nil {
		return nil, refuse(err)
	}
	ttl := time.Duration(m.GetTtlMs()) * time.Millisecond
	if err := requireLive(b, "; its lease cannot be renewed"); err != nil {
		return nil, err
	}
	at := timestamppb.New(s.now().Add(ttl))
	nb := proto.Clone(b).(*managerv1.Bundle)
	nb.LeaseExpiresAt = at
	s.putBundle(nb, s.nextIndex(), "lease renewed", false)
	return connect.NewResponse(&managerv1.RenewBundleLeaseResponse{ExpiresAt: at}), nil
}

// PauseLeases implements the Manager service.
func (s *Server) PauseLeases(_ context.Context, req *connect.Request[managerv1.PauseLeasesRequest]) (*connect.Response[managerv1.PauseLeasesResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateLeasePause(m.GetReason(), m.GetBy()); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLeasesPaused(true, m.GetReason(), m.GetBy())
	return connect.NewResponse(&managerv1.PauseLeasesResponse{}), nil
}

// ResumeLeases implements the Manager service.
func (s *Server) ResumeLeases(_ context.Context, req *connect.Request[managerv1.ResumeLeasesRequest]) (*connect.Response[managerv1.ResumeLeasesResponse], error) {
	if err := jobspec.ValidateLeaseResume(req.Msg.GetBy()); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLeasesPaused(false, "", req.Msg.GetBy())
	return connect.NewResponse(&managerv1.ResumeLeasesResponse{}), nil
}

// setLeasesPaused pauses or resumes leases; pausing while paused, or
// resuming while running, changes nothing. Callers hold mu.
func (s *Server) setLeasesPaused(paused bool, reason, by string) {
	if s.leases.paused == paused {
		return
	}
	i := s.nextIndex()
	s.leases.paused, s.leases.reason, s.leases.by, s.leases.since = paused, reason, by, timestamppb.New(s.now())
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_LeaseStatus{LeaseStatus: &managerv1.LeaseStatus{
		Paused: paused, Reason: reason, By: by, Since: s.leases.since,
	}}})
}

// GetLeaseStatus implements the Manager service.
func (s *Server) GetLeaseStatus(context.Context, *connect.Request[managerv1.GetLeaseStatusRequest]) (*connect.Response[managerv1.LeaseStatus], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.leases
	now, ttl := s.now(), s.leaseTTL()
	out := &managerv1.LeaseStatus{Paused: ls.paused, Reason: ls.reason, By: ls.by, Since: ls.since, TtlMs: ttl.Milliseconds()}
	for _, id := range sortedIDs(s.jobs) {
		j := s.jobs[id]
		if !j.GetJob().GetLeaseProtected() {
			continue
		}
		for _, in := range j.GetInstances() {
			if in.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
				continue
			}
			at := now // an online node's worker refreshes continuously
			if n := s.nodes[in.GetNodeId()]; n == nil || n.GetState() != managerv1.NodeState_NODE_STATE_ONLINE {
				at = n.GetStateSince().AsTime()
			}
			if !ls.paused && ls.since != nil && ls.since.AsTime().After(at) {
				at = ls.since.AsTime()
			}
			exp := at.Add(ttl)
			out.Leases = append(out.Leases, &managerv1.Lease{
				JobId: id, Role: in.GetRole(), NodeId: in.GetNodeId(), FencingToken: in.GetFencingToken(),
				RefreshedAt: timestamppb.New(at), ExpiresAt: timestamppb.New(exp),
				Expired: !ls.paused && !now.Before(exp),
			})
		}
	}
	return connect.NewResponse(out), nil
}

// phaseWord is a migration phase as seed 004 names it (launching,
// stoppingSource, ...).
func phaseWord(p managerv1.MigrationPhase) string {
	w := strings.Split(strings.ToLower(strings.TrimPrefix(p.String(), "MIGRATION_PHASE_")), "_")
	for i := 1; i < len(w); i++ {
		if w[i] != "" {
			w[i] = strings.ToUpper(w[i][:1]) + w[i][1:]
		}
	}
	return strings.Join(w, "")
}
