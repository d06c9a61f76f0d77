package norsktest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// The fake's Manager cluster: a small in-memory model of membership. The
// fake itself is member MemberName, the primary, in a cluster of one at
// generation 1 and term 1. AddClusterMember expects more members;
// JoinClusterMember, SetMemberReachable and SetQuorumLost play what their
// Managers would do. The fake elects nothing: the primary changes only when
// a call hands the role over (RemoveClusterMember of the primary,
// LeaveQuorum on it), when SetQuorumLost says it is gone, and when
// ForceStandalone recovers. Membership calls check, refuse and answer as
// the Manager does (internal/cluster/membership.go); nothing restarts.

// MemberName is the fake's own member name in its cluster.
const MemberName = "fake-1"

// consistencyHeader is the request header of a linearizable read (the SDK's
// norsk.ConsistencyHeader).
const consistencyHeader = "Norsk-Consistency"

// Member statuses of the fake's cluster, as the Manager's store records
// them.
const (
	memberExpected = "expected"
	memberJoined   = "joined"
	memberRetired  = "retired"
)

type fakeMember struct {
	name      string
	witness   bool
	status    string
	voter     bool // in the (modelled) raft configuration
	reachable bool
}

type clusterState struct {
	standalone bool
	// primary is the member that leads; "" when the quorum is lost.
	primary          string
	generation, term uint64
	members          map[string]*fakeMember
	events           []*managerv1.ClusterEvent
	announceURL      string
	announceInterval time.Duration
	announceAt       time.Time
}

// clu is the cluster model, made on first use. Callers hold mu.
func (s *Server) clu() *clusterState {
	if s.cluster == nil {
		s.cluster = &clusterState{
			primary: MemberName, generation: 1, term: 1,
			members: map[string]*fakeMember{MemberName: {name: MemberName, status: memberJoined, voter: true, reachable: true}},
		}
		s.clusterEvent("role-change", "became the primary")
	}
	return s.cluster
}

// clusterEvent records an event of the fake's own cluster event log.
// Callers hold mu.
func (s *Server) clusterEvent(kind, detail string) {
	c := s.cluster
	c.events = append(c.events, &managerv1.ClusterEvent{At: timestamppb.New(s.now()), Kind: kind, Detail: detail, Term: c.term, Generation: c.generation})
}

// SetStandalone makes the fake a Manager that runs standalone (no
// clusterNodes): the membership calls and ForceStandalone fail with
// FAILED_PRECONDITION, as the Manager's do.
func (s *Server) SetStandalone(standalone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clu().standalone = standalone
}

// SetQuorumLost says whether the cluster's primary is gone (lost = no
// primary: ForceStandalone is allowed, membership changes fail with
// UNAVAILABLE, and so do linearizable reads). Setting it back to false makes
// the fake the primary again, at a new term.
func (s *Server) SetQuorumLost(lost bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clu()
	switch {
	case lost && c.primary != "":
		was := c.primary
		c.primary = ""
		if was == MemberName {
			s.clusterEvent("role-change", "no longer the primary (the primary is now none)")
		}
	case !lost && c.primary == "":
		c.term++
		c.primary = MemberName
		s.clusterEvent("role-change", "became the primary")
	}
}

// JoinClusterMember plays an expected member's Manager starting and joining
// (or a member that lost its place rejoining): it becomes a reachable voter.
// It reports whether name is a member of the cluster (expected or joined).
func (s *Server) JoinClusterMember(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.clu().members[name]
	if m == nil || m.status == memberRetired {
		return false
	}
	if m.status != memberJoined || !m.voter {
		s.clusterEvent("member-joined", fmt.Sprintf("%s %s joined (raft %s, API %s)", witnessOrMember(m.witness), name, raftAddress(name), s.memberURL(name)))
	}
	m.status, m.voter, m.reachable = memberJoined, true, true
	return true
}

// SetMemberReachable makes a joined member answer status calls or not (the
// fake's own member is always reachable). It reports whether name is a
// member of the cluster.
func (s *Server) SetMemberReachable(name string, reachable bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.clu().members[name]
	if m == nil || m.status == memberRetired {
		return false
	}
	if name != MemberName {
		m.reachable = reachable && m.status == memberJoined
	}
	return true
}

// ClusterGeneration is the fake cluster's generation.
func (s *Server) ClusterGeneration() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clu().generation
}

func witnessOrMember(w bool) string {
	if w {
		return "witness"
	}
	return "member"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func raftAddress(name string) string { return name + ":6791" }

// memberURL is a member's API URL: the fake's own, or a made-up one.
// Callers hold mu.
func (s *Server) memberURL(name string) string {
	if name == MemberName {
		return s.URL
	}
	return "http://" + name + ":6790"
}

// validateNode checks a member's node name as the Manager does.
func validateNode(node string) error {
	return refuse(jobspec.ValidateID("node", node))
}

// requireClustered refuses membership calls on a standalone fake. Callers
// hold mu.
func (s *Server) requireClustered(what string) error {
	if s.clu().standalone {
		return errorf(connect.CodeFailedPrecondition, "%s: this Manager runs standalone; name the members in config.yaml (clusterNodes) to run a cluster (docs/operations.md)", what)
	}
	return nil
}

// expectedMembers lists the members that are expected or joined, by name.
// Callers hold mu.
func (s *Server) expectedMembers() []string {
	var out []string
	for name, m := range s.clu().members {
		if m.status != memberRetired {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// AddClusterMember implements the Manager service.
func (s *Server) AddClusterMember(_ context.Context, req *connect.Request[managerv1.AddClusterMemberRequest]) (*connect.Response[managerv1.AddClusterMemberResponse], error) {
	r := req.Msg
	if err := validateNode(r.GetNode()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.requireClustered("add a member"); err != nil {
		return nil, err
	}
	c := s.clu()
	if c.primary == "" {
		return nil, errorf(connect.CodeUnavailable, "no primary to commit the change; retry once a quorum is up")
	}
	cur := c.members[r.GetNode()]
	switch {
	case cur == nil:
		c.members[r.GetNode()] = &fakeMember{name: r.GetNode(), witness: r.GetWitness(), status: memberExpected}
	case cur.status == memberRetired:
		cur.status, cur.witness, cur.voter, cur.reachable = memberExpected, r.GetWitness(), false, false
	case cur.witness != r.GetWitness():
		what := "full member"
		if cur.witness {
			what = "witness"
		}
		return nil, errorf(connect.CodeFailedPrecondition, "member %q is already expected as a %s", r.GetNode(), what)
	}
	s.nextIndex()
	s.clusterEvent("member-expected", fmt.Sprintf("%s %s was added by %s; it joins when it starts with clusterState: existing",
		witnessOrMember(r.GetWitness()), r.GetNode(), orNone(r.GetBy())))
	return connect.NewResponse(&managerv1.AddClusterMemberResponse{Members: s.expectedMembers()}), nil
}

// RemoveClusterMember implements the Manager service. Removing the primary
// hands its role to another full member first, as the Manager does.
func (s *Server) RemoveClusterMember(_ context.Context, req *connect.Request[managerv1.RemoveClusterMemberRequest]) (*connect.Response[managerv1.RemoveClusterMemberResponse], error) {
	node := req.Msg.GetNode()
	if err := validateNode(node); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.requireClustered("remove a member"); err != nil {
		return nil, err
	}
	c := s.clu()
	if c.primary == "" {
		return nil, errorf(connect.CodeUnavailable, "no primary to remove %s; retry once a quorum is up", node)
	}
	m := c.members[node]
	if m == nil || m.status == memberRetired {
		return nil, errorf(connect.CodeNotFound, "no member %q in this cluster (members: %s)", node, strings.Join(s.expectedMembers(), ", "))
	}
	var fullOthers []string
	for _, name := range s.expectedMembers() {
		if o := c.members[name]; name != node && o.voter && !o.witness {
			fullOthers = append(fullOthers, name)
		}
	}
	if len(fullOthers) == 0 {
		return nil, errorf(connect.CodeFailedPrecondition, "%s is the last full member: add another before removing it", node)
	}
	if node == c.primary {
		s.clusterEvent("handing-over", "this primary is being removed; handing the primary role to another full member")
		c.primary = fullOthers[0]
		c.term++
		if node == MemberName {
			s.clusterEvent("role-change", "no longer the primary (the primary is now "+c.primary+")")
		}
	}
	m.status, m.voter, m.reachable = memberRetired, false, false
	s.nextIndex()
	s.clusterEvent("member-retired", node+" was removed from the cluster")
	return connect.NewResponse(&managerv1.RemoveClusterMemberResponse{}), nil
}

// ForceStandalone implements the Manager service: refused while a primary
// is reachable (see SetQuorumLost); otherwise the fake becomes a cluster of
// one, the primary, at the next generation, and the other members stop
// being voters until they rejoin (JoinClusterMember).
func (s *Server) ForceStandalone(_ context.Context, req *connect.Request[managerv1.ForceStandaloneRequest]) (*connect.Response[managerv1.ForceStandaloneResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.requireClustered("force standalone"); err != nil {
		return nil, err
	}
	c := s.clu()
	if c.primary != "" {
		return nil, errorf(connect.CodeFailedPrecondition, "the primary %s is reachable: the cluster has quorum, nothing to recover (remove a lost member with RemoveClusterMember instead)", c.primary)
	}
	gen := c.generation + 1
	s.clusterEvent("force-standalone", fmt.Sprintf("%s forced this member standalone: it restarts as a cluster of one at generation %d keeping its state (index %d)",
		orNone(req.Msg.GetBy()), gen, s.index))
	for name, m := range c.members {
		if name != MemberName {
			m.voter, m.reachable = false, false
		}
	}
	c.generation, c.primary = gen, MemberName
	c.term++
	s.nextIndex()
	s.clusterEvent("role-change", "became the primary")
	s.clusterEvent("takeover-settled", fmt.Sprintf("running as a cluster of one at generation %d; other members rejoin as followers when they come back", gen))
	return connect.NewResponse(&managerv1.ForceStandaloneResponse{Generation: gen}), nil
}

// LeaveQuorum implements the Manager service: the primary hands its role
// to another reachable full member first (refused when there is none); the
// fake then stays a follower, as the Manager is once it has rejoined.
func (s *Server) LeaveQuorum(_ context.Context, req *connect.Request[managerv1.LeaveQuorumRequest]) (*connect.Response[managerv1.LeaveQuorumResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.requireClustered("leave the quorum"); err != nil {
		return nil, err
	}
	c := s.clu()
	if c.primary == MemberName {
		next := ""
		for _, name := range s.expectedMembers() {
			if o := c.members[name]; name != MemberName && o.voter && o.reachable && !o.witness {
				next = name
				break
			}
		}
		if next == "" {
			return nil, errorf(connect.CodeFailedPrecondition, "this member is the primary and could not hand the role over (no other full member is reachable); it would take the cluster's only committed copy with it")
		}
		c.primary = next
		c.term++
		s.clusterEvent("role-change", "no longer the primary (the primary is now "+next+")")
	}
	s.clusterEvent("leave-quorum", orNone(req.Msg.GetBy())+" asked this member to leave the quorum: it discards its copy and rejoins as a follower")
	return connect.NewResponse(&managerv1.LeaveQuorumResponse{}), nil
}

// GetClusterStatus implements the Manager service.
func (s *Server) GetClusterStatus(context.Context, *connect.Request[managerv1.GetClusterStatusRequest]) (*connect.Response[managerv1.ClusterStatus], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clu()
	now := s.now()
	out := &managerv1.ClusterStatus{AnsweredBy: MemberName, Primary: c.primary, Generation: c.generation, Term: c.term, CommitIndex: s.index}
	for _, name := range s.expectedMembers() {
		m := c.members[name]
		cm := &managerv1.ClusterMember{Name: name, Witness: m.witness, Voter: m.voter, Role: managerv1.MemberRole_MEMBER_ROLE_UNKNOWN}
		if m.status == memberJoined {
			cm.RaftAddress, cm.ApiUrl = raftAddress(name), s.memberURL(name)
		}
		switch {
		case !m.reachable && m.status == memberExpected:
			cm.Detail = "expected: added, not yet joined (start it with clusterState: existing); no API URL known yet (it has not joined)"
		case !m.reachable:
			cm.Detail = "unreachable (norsktest)"
		default:
			cm.Reachable, cm.AppliedIndex, cm.Generation = true, s.index, c.generation
			switch {
			case m.witness:
				cm.Role = managerv1.MemberRole_MEMBER_ROLE_WITNESS
			case name == c.primary:
				cm.Role = managerv1.MemberRole_MEMBER_ROLE_PRIMARY
			case m.voter:
				cm.Role = managerv1.MemberRole_MEMBER_ROLE_FOLLOWER
			}
			if c.primary != "" {
				cm.LastContact = timestamppb.New(now)
			}
		}
		if name == MemberName && c.announceURL != "" {
			cm.ControlPlaneUrl = c.announceURL
			cm.ControlPlaneStale = c.announceInterval > 0 && now.Sub(c.announceAt) > 3*c.announceInterval
			cm.ControlPlaneAnnouncedAt = timestamppb.New(c.announceAt)
		}
		if cm.Voter {
			out.Voters++
			if cm.Reachable {
				out.VotersReachable++
			}
		}
		out.Members = append(out.Members, cm)
	}
	out.Quorum = out.Voters/2 + 1
	out.QuorumHealthy = out.Primary != "" && out.VotersReachable >= out.Quorum
	return connect.NewResponse(out), nil
}

// GetClusterEvents implements the Manager service: the fake's own cluster
// event log, newest first.
func (s *Server) GetClusterEvents(_ context.Context, req *connect.Request[managerv1.GetClusterEventsRequest]) (*connect.Response[managerv1.GetClusterEventsResponse], error) {
	limit, since, err := jobspec.ClusterEventsQuery(req.Msg)
	if err != nil {
		return nil, refuse(err)
	}
	kinds := req.Msg.GetKinds()
	s.mu.Lock()
	defer s.mu.Unlock()
	evs := s.clu().events
	out := &managerv1.GetClusterEventsResponse{Member: MemberName}
	for i := len(evs) - 1; i >= 0 && len(out.Events) < limit; i-- {
		ev := evs[i]
		if !since.IsZero() && ev.GetAt().AsTime().Before(since) {
			break
		}
		if len(kinds) > 0 && !slices.Contains(kinds, ev.GetKind()) {
			continue
		}
		out.Events = append(out.Events, &managerv1.ClusterEvent{At: ev.GetAt(), Kind: ev.GetKind(), Detail: ev.GetDetail(), Term: ev.GetTerm(), Generation: ev.GetGeneration()})
	}
	return connect.NewResponse(out), nil
}

// AnnounceControlPlane implements the Manager service: GetClusterStatus
// reports the fake's own member's norsk-mgr, stale once three intervals of
// the fake's clock pass without another announcement.
func (s *Server) AnnounceControlPlane(_ context.Context, req *connect.Request[managerv1.AnnounceControlPlaneRequest]) (*connect.Response[managerv1.AnnounceControlPlaneResponse], error) {
	raw := req.Msg.GetUrl()
	if err := jobspec.ValidateControlPlaneURL(raw); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clu()
	c.announceURL, c.announceInterval, c.announceAt = raw, time.Duration(req.Msg.GetIntervalMs())*time.Millisecond, s.now()
	return connect.NewResponse(&managerv1.AnnounceControlPlaneResponse{}), nil
}
