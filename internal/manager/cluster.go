package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/intercept"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// forcedMarker, in the data directory, holds the generation a forced
// recovery moves to (and who asked) until the recovered member, leading
// alone, has committed it. A crash in between finishes the job at the next
// boot.
const forcedMarker = "FORCED-STANDALONE"

// statusTimeout bounds each member's answer to a status query.
const statusTimeout = time.Second

// requireClustered refuses membership calls on a standalone member.
func (s *Server) requireClustered(what string) error {
	if !s.cfg.clustered() {
		return apierr.FailedPreconditionf("%s: this Manager runs standalone; name the members in config.yaml (clusterNodes) to run a cluster (docs/operations.md)", what)
	}
	return nil
}

func witnessOrMember(w bool) string {
	if w {
		return "witness"
	}
	return "member"
}

// errHandedOver: the primary handed its role over before removing itself;
// the new primary finishes the removal.
var errHandedOver = fmt.Errorf("handed the primary role over")

// removeMember takes node out of the raft configuration and retires it.
// Primary only. Removing the primary hands its role to another full member
// first (errHandedOver).
func (s *Server) removeMember(ctx context.Context, st *store.Store, node string) error {
	r := st.State().Snapshot()
	rec := r.Member(node)
	conf, err := st.Configuration()
	if err != nil {
		return err
	}
	inConf := slices.ContainsFunc(conf, func(sv raft.Server) bool { return string(sv.ID) == node })
	if (rec == nil || rec.GetStatus() == state.MemberRetired) && !inConf {
		return apierr.NotFoundf("no member %s in this cluster (members: %s)", apierr.Quote(node), strings.Join(r.ExpectedMembers(), ", "))
	}
	// Another full member must remain to lead.
	if len(s.fullVoters(conf, node)) == 0 {
		return apierr.FailedPreconditionf("%s is the last full member: add another before removing it", node)
	}
	if node == s.cfg.NodeName {
		if err := s.handOff(ctx, st, "this primary is being removed"); err != nil {
			return apierr.Unavailablef("could not hand the primary role over before removing this member: %v", err)
		}
		return errHandedOver
	}
	if inConf {
		if err := st.RemoveServer(node); err != nil {
			return err
		}
	}
	if rec != nil && rec.GetStatus() != state.MemberRetired {
		cmd := &storev1.Command{
			Time: timestamppb.New(s.cfg.Clock.Now()),
			Cmd:  &storev1.Command_MemberRetired{MemberRetired: &storev1.MemberRetired{Name: node}},
		}
		cmd.Audit = intercept.AuditStamp(ctx, cmd)
		if _, err := st.Apply(ctx, cmd); err != nil {
			return fmt.Errorf("record %s as retired: %w", node, err)
		}
	}
	s.member.events.Record("member-retired", node+" was removed from the cluster", st.Term(), r.Generation())
	return nil
}

// forceStandalone checks that a forced recovery is safe and starts it: the
// member restarts its store as a cluster of one at the next generation.
func (s *Server) forceStandalone(ctx context.Context, by string) (uint64, error) {
	if s.cfg.Witness {
		return 0, apierr.FailedPreconditionf("this member is a witness: it holds no job state to recover from; run force-standalone on a full member")
	}
	if err := s.requireClustered("force standalone"); err != nil {
		return 0, err
	}
	st := s.st()
	if st == nil {
		return 0, apierr.FailedPreconditionf("this member has no store open (a recovery is under way)")
	}
	r := st.State().Snapshot()
	if r.Index() == 0 || r.Generation() == 0 {
		return 0, apierr.FailedPreconditionf("this member has no store to recover from (it never received the cluster's state); run force-standalone on a member that did")
	}
	if leader, _ := st.Leader(); leader != "" {
		return 0, apierr.FailedPreconditionf("the primary %s is reachable: the cluster has quorum, nothing to recover (remove a lost member with RemoveClusterMember instead)", leader)
	}
	for _, p := range s.peerStatuses(ctx) {
		if p.err == nil && p.status.GetLeader() != "" {
			return 0, apierr.FailedPreconditionf("member %s reports a primary (%s): the cluster has quorum; this member is cut off from it, not the other way round", p.name, p.status.GetLeader())
		}
	}
	gen := r.Generation() + 1
	marker := filepath.Join(s.cfg.DataDir, forcedMarker)
	if err := writeFileSync(marker, []byte(strconv.FormatUint(gen, 10)+"\n"+by+"\n")); err != nil {
		return 0, fmt.Errorf("record the forced recovery: %w", err)
	}
	s.member.events.Record("force-standalone", fmt.Sprintf("%s forced this member standalone: it restarts as a cluster of one at generation %d keeping its state (index %d)",
		orNone(by), gen, r.Index()), st.Term(), r.Generation())
	cfg := s.storeConfig(false)
	if !s.member.requestRestart(func() error {
		idx, err := store.RecoverStandalone(cfg)
		if err != nil {
			return err
		}
		s.log.Warn("forced standalone: recovered the store as a cluster of one", "index", idx, "generation", gen)
		return nil
	}) {
		_ = os.Remove(marker)
		return 0, apierr.Unavailablef("a recovery is already under way on this member")
	}
	return gen, nil
}

// finishForced, on the primary of a recovered member, moves the membership
// to the generation the forced recovery chose.
func (m *memberState) finishForced(ctx context.Context, st *store.Store) error {
	s := m.s
	marker := filepath.Join(s.cfg.DataDir, forcedMarker)
	b, err := os.ReadFile(marker)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	lines := strings.SplitN(string(b), "\n", 3)
	gen, err := strconv.ParseUint(strings.TrimSpace(lines[0]), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %w", marker, err)
	}
	if cur := st.State().Snapshot().Generation(); gen > cur {
		by := ""
		if len(lines) > 1 {
			by = strings.TrimSpace(lines[1])
		}
		if _, err := st.Apply(ctx, &storev1.Command{
			Time:  timestamppb.New(s.cfg.Clock.Now()),
			Audit: &storev1.AuditStamp{Who: "member:" + s.cfg.NodeName + " (by " + orNone(by) + ")", Method: "ForceStandalone", Target: "cluster", Source: "manager"},
			Cmd:   &storev1.Command_SetGeneration{SetGeneration: &storev1.SetGeneration{Generation: gen}},
		}); err != nil {
			return fmt.Errorf("move to generation %d: %w", gen, err)
		}
	}
	m.events.Record("takeover-settled", fmt.Sprintf("running as a cluster of one at generation %d; other members rejoin as followers when they come back", gen), st.Term(), gen)
	return os.Remove(marker)
}

// leaveQuorum marks this member's copy for discarding and restarts its
// store: it comes back empty, as a follower, and catches up from the
// cluster (or waits for one).
func (s *Server) leaveQuorum(by string) error {
	if err := s.requireClustered("leave the quorum"); err != nil {
		return err
	}
	st := s.st()
	if st != nil && st.IsLeader() {
		if err := st.TransferLeadership("", ""); err != nil {
			return apierr.FailedPreconditionf("this member is the primary and could not hand the role over (%v); it would take the cluster's only committed copy with it", err)
		}
	}
	if err := writeFileSync(filepath.Join(s.cfg.DataDir, leaveMarker), []byte(by+"\n")); err != nil {
		return fmt.Errorf("record leaving the quorum: %w", err)
	}
	var term, gen uint64
	if st != nil {
		term, gen = st.Term(), st.State().Snapshot().Generation()
	}
	s.member.events.Record("leave-quorum", orNone(by)+" asked this member to leave the quorum: it discards its copy and rejoins as a follower", term, gen)
	s.member.requestRestart(nil)
	return nil
}

// controlPlane is this member's announcement and whether it is stale
// (three intervals without one; never without an interval).
func (m *memberState) controlPlane(now time.Time) (a announcement, stale bool) {
	m.mu.Lock()
	a = m.announce
	m.mu.Unlock()
	return a, a.url != "" && a.interval > 0 && now.Sub(a.at) > 3*a.interval
}

// localStatus is this member's own view of itself.
func (s *Server) localStatus() *managerv1.MemberStatusResponse {
	out := &managerv1.MemberStatusResponse{Name: s.cfg.NodeName, Witness: s.cfg.Witness, ApiUrl: s.url, Role: managerv1.MemberRole_MEMBER_ROLE_UNKNOWN}
	if a, stale := s.member.controlPlane(s.cfg.Clock.Now()); a.url != "" {
		out.ControlPlaneUrl, out.ControlPlaneStale, out.ControlPlaneAnnouncedAt = a.url, stale, timestamppb.New(a.at)
	}
	st := s.st()
	if st == nil {
		return out
	}
	r := st.State().Snapshot()
	out.RaftAddress = st.Addr()
	out.AppliedIndex = r.Index()
	out.CommitIndex = st.CommitIndex()
	out.Term = st.Term()
	out.Generation = r.Generation()
	out.Leader, _ = st.Leader()
	if lc := st.LastContact(); !lc.IsZero() {
		out.LastLeaderContact = timestamppb.New(lc)
	}
	if conf, err := st.Configuration(); err == nil {
		for _, sv := range conf {
			if sv.Suffrage == raft.Voter {
				out.Voters++
			}
		}
	}
	switch {
	case s.cfg.Witness:
		out.Role = managerv1.MemberRole_MEMBER_ROLE_WITNESS
	case st.IsLeader():
		out.Role = managerv1.MemberRole_MEMBER_ROLE_PRIMARY
		out.LastLeaderContact = timestamppb.New(s.cfg.Clock.Now())
	case out.Voters > 0:
		out.Role = managerv1.MemberRole_MEMBER_ROLE_FOLLOWER
	}
	return out
}

func (h *membersHandler) MemberStatus(ctx context.Context, req *connect.Request[managerv1.MemberStatusRequest]) (*connect.Response[managerv1.MemberStatusResponse], error) {
	return connect.NewResponse(h.s.localStatus()), nil
}

// peerStatus is one peer's answer to a status query.
type peerStatus struct {
	name, url string
	status    *managerv1.MemberStatusResponse
	err       error
}

// peerStatuses asks every other member this one knows of for its status,
// concurrently, each within statusTimeout.
func (s *Server) peerStatuses(ctx context.Context) []peerStatus {
	type peer struct{ name, url string }
	var peers []peer
	seen := map[string]bool{s.cfg.NodeName: true}
	if st := s.st(); st != nil {
		for _, mr := range st.State().Snapshot().Members() {
			if !seen[mr.GetName()] && mr.GetStatus() != state.MemberRetired {
				seen[mr.GetName()] = true
				peers = append(peers, peer{mr.GetName(), mr.GetApiUrl()})
			}
		}
	}
	for _, n := range s.cfg.ClusterNodes {
		if !seen[n.Name] && !s.retired(n.Name) {
			seen[n.Name] = true
			peers = append(peers, peer{n.Name, n.API})
		}
	}
	out := make([]peerStatus, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		out[i] = peerStatus{name: p.name, url: p.url}
		if p.url == "" {
			out[i].err = fmt.Errorf("no API URL known yet (it has not joined)")
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, statusTimeout)
			defer cancel()
			res, err := s.memberClient(p.url).MemberStatus(cctx, newMemberRequest(s, &managerv1.MemberStatusRequest{}))
			if err != nil {
				out[i].err = err
				return
			}
			out[i].status = res.Msg
		}()
	}
	wg.Wait()
	return out
}

// clusterStatus gathers every member's own view into the cluster's.
func (s *Server) clusterStatus(ctx context.Context) *managerv1.ClusterStatus {
	me := s.localStatus()
	out := &managerv1.ClusterStatus{AnsweredBy: s.cfg.NodeName, Primary: me.GetLeader(), Generation: me.GetGeneration(),
		Term: me.GetTerm(), CommitIndex: me.GetCommitIndex()}
	st := s.st()
	voters := map[string]bool{}
	var r *state.Read
	if st != nil {
		r = st.State().Snapshot()
		if conf, err := st.Configuration(); err == nil {
			for _, sv := range conf {
				if sv.Suffrage == raft.Voter {
					voters[string(sv.ID)] = true
				}
			}
		}
	}
	view := func(p *managerv1.MemberStatusResponse) *managerv1.ClusterMember {
		return &managerv1.ClusterMember{
			Name: p.GetName(), Role: p.GetRole(), Witness: p.GetWitness(), RaftAddress: p.GetRaftAddress(), ApiUrl: p.GetApiUrl(),
			Reachable: true, LastContact: p.GetLastLeaderContact(), AppliedIndex: p.GetAppliedIndex(), Generation: p.GetGeneration(),
			ControlPlaneUrl: p.GetControlPlaneUrl(), ControlPlaneStale: p.GetControlPlaneStale(), ControlPlaneAnnouncedAt: p.GetControlPlaneAnnouncedAt(),
		}
	}
	members := []*managerv1.ClusterMember{view(me)}
	if s.cfg.clustered() {
		for _, p := range s.peerStatuses(ctx) {
			if p.err == nil {
				members = append(members, view(p.status))
				continue
			}
			cm := &managerv1.ClusterMember{Name: p.name, ApiUrl: p.url, Role: managerv1.MemberRole_MEMBER_ROLE_UNKNOWN, Detail: p.err.Error()}
			if r != nil {
				if mr := r.Member(p.name); mr != nil {
					cm.Witness, cm.RaftAddress = mr.GetWitness(), mr.GetRaftAddress()
					if mr.GetStatus() == state.MemberExpected {
						cm.Detail = "expected: added, not yet joined (start it with clusterState: existing); " + cm.Detail
					}
				}
			}
			if n, ok := s.cfg.clusterNode(p.name); ok {
				cm.Witness = cm.Witness || n.Witness
				if cm.RaftAddress == "" {
					cm.RaftAddress = n.Raft
				}
			}
			members = append(members, cm)
		}
	}
	for _, cm := range members {
		cm.Voter = voters[cm.GetName()]
		if cm.Voter {
			out.Voters++
			if cm.GetReachable() {
				out.VotersReachable++
			}
		}
	}
	slices.SortFunc(members, func(a, b *managerv1.ClusterMember) int { return strings.Compare(a.GetName(), b.GetName()) })
	out.Members = members
	out.Quorum = out.Voters/2 + 1
	out.QuorumHealthy = out.Primary != "" && out.VotersReachable >= out.Quorum
	return out
}

// managerClient is a Manager client for another member (a call passed on
// with its caller's credential).
func (s *Server) managerClient(url string) managerv1connect.ManagerClient {
	s.memberClient(url) // the shared HTTP client, made once
	mc := &s.members
	mc.mu.Lock()
	defer mc.mu.Unlock()
	c, ok := mc.managerByURL[url]
	if !ok {
		if mc.managerByURL == nil {
			mc.managerByURL = map[string]managerv1connect.ManagerClient{}
		}
		c = managerv1connect.NewManagerClient(mc.hc, url, connect.WithGRPC())
		mc.managerByURL[url] = c
	}
	return c
}

// Join, on the primary, adds a member the cluster expects to the raft
// configuration; another member passes it to the primary.
func (h *membersHandler) Join(ctx context.Context, req *connect.Request[managerv1.JoinRequest]) (*connect.Response[managerv1.JoinResponse], error) {
	s := h.s
	m := req.Msg
	if err := jobspec.ValidateID("name", m.GetName()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if m.GetRaftAddress() == "" {
		return nil, rpcerr.ToConnect(apierr.Invalid("raftAddress", "must not be empty"))
	}
	st := s.st()
	if st == nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("this member's store is being replaced"))
	}
	if !st.IsLeader() {
		leader, _ := st.Leader()
		if leader == "" || leader == s.cfg.NodeName {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("no primary to add %s", m.GetName()))
		}
		return s.memberClient(s.memberAPI(leader)).Join(ctx, newMemberRequest(s, m))
	}
	r := st.State().Snapshot()
	rec := r.Member(m.GetName())
	if rec == nil || rec.GetStatus() == state.MemberRetired {
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("%s is not expected by this cluster: add it first (norsk-ctl cluster add %s)", m.GetName(), m.GetName()))
	}
	if rec.GetWitness() != m.GetWitness() {
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("%s is expected as a %s but started as a %s", m.GetName(), witnessOrMember(rec.GetWitness()), witnessOrMember(m.GetWitness())))
	}
	// A member that is not a voter yet catches up first: it becomes one
	// (promoteCaughtUp) once it holds the log, so a slow joiner never
	// costs the cluster its quorum.
	conf, err := st.Configuration()
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if slices.ContainsFunc(conf, func(sv raft.Server) bool { return string(sv.ID) == m.GetName() && sv.Suffrage == raft.Voter }) {
		err = st.AddVoter(m.GetName(), m.GetRaftAddress())
	} else {
		err = st.AddNonvoter(m.GetName(), m.GetRaftAddress())
	}
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if rec.GetStatus() != state.MemberJoined || rec.GetRaftAddress() != m.GetRaftAddress() || rec.GetApiUrl() != m.GetApiUrl() {
		if _, err := st.Apply(ctx, &storev1.Command{
			Time:  timestamppb.New(s.cfg.Clock.Now()),
			Audit: &storev1.AuditStamp{Who: "member:" + m.GetName(), Method: "Join", Target: "member/" + m.GetName(), Source: "manager"},
			Cmd: &storev1.Command_MemberJoined{MemberJoined: &storev1.MemberJoined{
				Name: m.GetName(), RaftAddress: m.GetRaftAddress(), ApiUrl: m.GetApiUrl(), Witness: m.GetWitness(),
			}},
		}); err != nil {
			return nil, rpcerr.ToConnect(err)
		}
		s.member.events.Record("member-joined", fmt.Sprintf("%s %s joined (raft %s, API %s)", witnessOrMember(m.GetWitness()), m.GetName(), m.GetRaftAddress(), m.GetApiUrl()),
			st.Term(), r.Generation())
	}
	return connect.NewResponse(&managerv1.JoinResponse{Generation: r.Generation()}), nil
}

// retired reports whether the membership records name as removed.
func (s *Server) retired(name string) bool {
	st := s.st()
	if st == nil {
		return false
	}
	mr := st.State().Snapshot().Member(name)
	return mr != nil && mr.GetStatus() == state.MemberRetired
}

// fullVoters are the voters of conf other than except that are not
// witnesses: the members that may lead.
func (s *Server) fullVoters(conf []raft.Server, except string) []raft.Server {
	var out []raft.Server
	for _, sv := range conf {
		if string(sv.ID) != except && sv.Suffrage == raft.Voter && !s.isWitness(string(sv.ID)) {
			out = append(out, sv)
		}
	}
	return out
}

// handOff hands the primary role to another full member, trying each in
// turn (raft bounds each attempt by an election timeout). It records why in
// the cluster events (unless why is empty). Primary only.
//
// Only a member that answers now and has applied the log up to (nearly)
// this primary's commit index is asked, the most caught-up first. That is
// not politeness: hashicorp/raft (v1.8) wedges a primary asked twice to
// hand over to a member its replication cannot reach — the second attempt
// blocks forever on the stuck replication's one-slot channel, and the
// "transfer in progress" flag it holds then refuses every write and every
// later hand-over (TestClusterPartitionedPrimaryIsReplaced: a witness led
// for good while the old primary was cut off). A member whose log keeps up
// is one whose replication drains that channel.
func (s *Server) handOff(ctx context.Context, st *store.Store, why string) error {
	conf, err := st.Configuration()
	if err != nil {
		return err
	}
	targets := s.fullVoters(conf, s.cfg.NodeName)
	if len(targets) == 0 {
		return errors.New("no other full member to take the primary role")
	}
	if why != "" {
		s.member.events.Record("handing-over", why+"; handing the primary role to another full member", st.Term(), st.State().Snapshot().Generation())
	}
	targets, err = s.caughtUpTargets(ctx, st, targets)
	if err != nil {
		return err
	}
	var last error
	for _, sv := range targets {
		if last = st.TransferLeadership(string(sv.ID), string(sv.Address)); last == nil {
			return nil
		}
		s.log.Debug("handing the primary role over", "to", sv.ID, "err", last)
		if !st.IsLeader() {
			return nil
		}
	}
	return last
}

// handOffSlack is how many entries behind this primary's commit index a
// member may have applied and still be handed the primary role.
const handOffSlack = 64

// caughtUpTargets keeps the members of targets that answer their status
// call now with the log applied to within handOffSlack of this member's
// commit index, the most caught-up first.
func (s *Server) caughtUpTargets(ctx context.Context, st *store.Store, targets []raft.Server) ([]raft.Server, error) {
	applied := map[string]uint64{}
	var why []string
	for _, p := range s.peerStatuses(ctx) {
		if p.err != nil {
			why = append(why, p.name+": "+p.err.Error())
			continue
		}
		applied[p.name] = p.status.GetAppliedIndex()
	}
	commit := st.CommitIndex()
	var out []raft.Server
	for _, sv := range targets {
		a, ok := applied[string(sv.ID)]
		switch {
		case !ok:
		case a+handOffSlack < commit:
			why = append(why, fmt.Sprintf("%s: applied %d of %d", sv.ID, a, commit))
		default:
			out = append(out, sv)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no full member is reachable and caught up (%s)", strings.Join(why, "; "))
	}
	slices.SortStableFunc(out, func(a, b raft.Server) int {
		return cmp.Compare(applied[string(b.ID)], applied[string(a.ID)])
	})
	return out, nil
}

// isWitness reports whether member name is a witness (by the membership,
// else the configuration).
func (s *Server) isWitness(name string) bool {
	if st := s.st(); st != nil {
		if mr := st.State().Snapshot().Member(name); mr != nil {
			return mr.GetWitness()
		}
	}
	n, ok := s.cfg.clusterNode(name)
	return ok && n.Witness
}

// caughtUpSlack is how far behind the primary's commit index a joining
// member may be and still be made a voter.
const caughtUpSlack = 256

// promoteCaughtUp, on the primary, makes every non-voting member that has
// caught up with the log a voter.
func (m *memberState) promoteCaughtUp(ctx context.Context, st *store.Store) {
	conf, err := st.Configuration()
	if err != nil {
		return
	}
	var waiting []raft.Server
	for _, sv := range conf {
		if sv.Suffrage == raft.Nonvoter {
			waiting = append(waiting, sv)
		}
	}
	if len(waiting) == 0 {
		return
	}
	commit := st.CommitIndex()
	for _, p := range m.s.peerStatuses(ctx) {
		if p.err != nil {
			continue
		}
		for _, sv := range waiting {
			if string(sv.ID) != p.name || p.status.GetAppliedIndex()+caughtUpSlack < commit {
				continue
			}
			if err := st.AddVoter(string(sv.ID), string(sv.Address)); err != nil {
				m.s.log.Warn("could not make a caught-up member a voter", "member", sv.ID, "err", err)
				continue
			}
			m.events.Record("member-promoted", fmt.Sprintf("%s caught up (applied %d of %d) and votes now", sv.ID, p.status.GetAppliedIndex(), commit),
				st.Term(), st.State().Snapshot().Generation())
		}
	}
}
