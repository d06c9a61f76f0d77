package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// localStatus is this member's own view of itself.
func (m *Member) localStatus() *managerv1.MemberStatusResponse {
	out := &managerv1.MemberStatusResponse{Name: m.cfg.Name, Witness: m.cfg.Witness, ApiUrl: m.cfg.URL, Role: managerv1.MemberRole_MEMBER_ROLE_UNKNOWN}
	if a, stale := m.controlPlane(m.cfg.Clock.Now()); a.url != "" {
		out.ControlPlaneUrl, out.ControlPlaneStale, out.ControlPlaneAnnouncedAt = a.url, stale, timestamppb.New(a.at)
	}
	st := m.Store()
	if st == nil {
		return out
	}
	r := st.State().Snapshot()
	out.RaftAddress = st.Addr()
	out.AppliedIndex = r.Index()
	out.CommitIndex = st.CommitIndex()
	out.Term = st.Term()
	out.Generation = r.Generation()
	out.ClusterId = r.ClusterID()
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
	case m.cfg.Witness:
		out.Role = managerv1.MemberRole_MEMBER_ROLE_WITNESS
	case st.IsLeader():
		out.Role = managerv1.MemberRole_MEMBER_ROLE_PRIMARY
		out.LastLeaderContact = timestamppb.New(m.cfg.Clock.Now())
	case out.Voters > 0:
		out.Role = managerv1.MemberRole_MEMBER_ROLE_FOLLOWER
	}
	return out
}

// peerStatus is one peer's answer to a status query.
type peerStatus struct {
	name, url string
	status    *managerv1.MemberStatusResponse
	err       error
}

// peerStatuses asks every other member this one knows of for its status,
// concurrently, each within statusTimeout. An answer for another cluster
// than this member's is an error, not a status.
func (m *Member) peerStatuses(ctx context.Context) []peerStatus {
	type peer struct{ name, url string }
	var peers []peer
	seen := map[string]bool{m.cfg.Name: true}
	if st := m.Store(); st != nil {
		for _, mr := range st.State().Snapshot().Members() {
			if !seen[mr.GetName()] && mr.GetStatus() != state.MemberRetired {
				seen[mr.GetName()] = true
				peers = append(peers, peer{mr.GetName(), mr.GetApiUrl()})
			}
		}
	}
	for _, n := range m.cfg.Nodes {
		if !seen[n.Name] && !m.retired(n.Name) {
			seen[n.Name] = true
			peers = append(peers, peer{n.Name, n.API})
		}
	}
	var ours string
	if st := m.Store(); st != nil {
		ours = st.State().Snapshot().ClusterID()
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
			res, err := m.memberClient(p.url).MemberStatus(cctx, newMemberRequest(m, &managerv1.MemberStatusRequest{}))
			if err != nil {
				out[i].err = err
				return
			}
			if theirs := res.Msg.GetClusterId(); ours != "" && theirs != "" && theirs != ours {
				out[i].err = fmt.Errorf("%s answers for another cluster (%s, not %s): a stale address, or two clusters given one secret", p.url, theirs, ours)
				return
			}
			out[i].status = res.Msg
		}()
	}
	wg.Wait()
	return out
}

// clusterStatus gathers every member's own view into the cluster's.
func (m *Member) clusterStatus(ctx context.Context) *managerv1.ClusterStatus {
	me := m.localStatus()
	out := &managerv1.ClusterStatus{AnsweredBy: m.cfg.Name, Primary: me.GetLeader(), Generation: me.GetGeneration(),
		Term: me.GetTerm(), CommitIndex: me.GetCommitIndex()}
	st := m.Store()
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
	if m.Clustered() {
		for _, p := range m.peerStatuses(ctx) {
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
			if n, ok := FindNode(m.cfg.Nodes, p.name); ok {
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

// peerURLs are the API URLs of the other members this one knows of.
func (m *Member) peerURLs() []string {
	seen := map[string]bool{m.cfg.URL: true}
	var out []string
	add := func(u string) {
		if u != "" && !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	if st := m.Store(); st != nil {
		for _, mr := range st.State().Snapshot().Members() {
			if mr.GetName() != m.cfg.Name && mr.GetStatus() != state.MemberRetired {
				add(mr.GetApiUrl())
			}
		}
	}
	for _, n := range m.cfg.Nodes {
		if n.Name != m.cfg.Name {
			add(n.API)
		}
	}
	return out
}

// MemberURLs are every full member's API URL, this one's first (for
// workers to re-register with after a failover).
func (m *Member) MemberURLs() []string {
	urls := []string{m.cfg.URL}
	seen := map[string]bool{m.cfg.URL: true}
	for _, mr := range m.Store().State().Snapshot().Members() {
		if mr.GetWitness() || mr.GetStatus() == state.MemberRetired || mr.GetApiUrl() == "" || seen[mr.GetApiUrl()] {
			continue
		}
		seen[mr.GetApiUrl()] = true
		urls = append(urls, mr.GetApiUrl())
	}
	return urls
}
