package tests

import (
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
)

// Three members and a witness form a cluster; writes sent to any full
// member are committed by the primary and reach every member.
func TestClusterFormsAndForwardsWrites(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Members: 3, Witnesses: 1})
	tw := watchTerms(t, c)
	load := startWriteLoad(t, c, "formation")
	load.waitMore(t, 60)

	st := clusterStatus(t, c, c.Member("m2"))
	if st.GetVoters() != 4 || st.GetVotersReachable() != 4 || st.GetQuorum() != 3 || !st.GetQuorumHealthy() || st.GetGeneration() != 1 {
		t.Errorf("status: voters %d reachable %d quorum %d healthy %v generation %d; want 4 4 3 true 1",
			st.GetVoters(), st.GetVotersReachable(), st.GetQuorum(), st.GetQuorumHealthy(), st.GetGeneration())
	}
	roles := map[string]managerv1.MemberRole{}
	for _, m := range st.GetMembers() {
		roles[m.GetName()] = m.GetRole()
	}
	if roles["w1"] != managerv1.MemberRole_MEMBER_ROLE_WITNESS || roles[c.Primary().Name] != managerv1.MemberRole_MEMBER_ROLE_PRIMARY {
		t.Errorf("roles: %v", roles)
	}
	// A witness serves no API beyond the cluster's own calls.
	if _, _, err := c.Member("w1").Client().KvList(ctx(t), "formation", ""); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("KvList on the witness: %v, want UNAVAILABLE", err)
	}
	load.checkEverywhere(t)
	tw.check(t)
}

// The primary is cut off from every other member: the others elect a new
// primary and keep committing; when the network heals the old primary
// follows. No acknowledged write is lost and no term has two primaries.
func TestClusterPartitionedPrimaryIsReplaced(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Members: 3, Witnesses: 1})
	tw := watchTerms(t, c)
	load := startWriteLoad(t, c, "partition")
	load.waitMore(t, 30)

	old := c.Primary()
	c.Net.Isolate(old.Name)
	waitNewPrimary(t, c, others(c, old))
	load.waitMore(t, 50)

	c.Net.Heal()
	c.Eventually(old.Name+" to follow again", func() bool {
		st := old.Server().Store()
		leader, _ := st.Leader()
		return leader != "" && leader != old.Name
	})
	load.waitMore(t, 30)
	load.checkEverywhere(t)
	tw.check(t)
}

// Removing the primary hands its role to another full member first; the
// cluster keeps committing without it.
func TestClusterRemovePrimary(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Members: 3, Witnesses: 1})
	tw := watchTerms(t, c)
	load := startWriteLoad(t, c, "remove")
	load.waitMore(t, 30)

	old := c.Primary()
	via := others(c, old)[0]
	if _, err := api(c, via).RemoveClusterMember(ctx(t), connect.NewRequest(&managerv1.RemoveClusterMemberRequest{Node: old.Name})); err != nil {
		t.Fatalf("remove the primary %s via %s: %v", old.Name, via.Name, err)
	}
	p := waitNewPrimary(t, c, others(c, old))
	old.Stop()
	load.waitMore(t, 50)
	st := clusterStatus(t, c, p)
	if st.GetVoters() != 3 {
		t.Errorf("voters after removing %s: %d, want 3", old.Name, st.GetVoters())
	}
	for _, m := range st.GetMembers() {
		if m.GetName() == old.Name {
			t.Errorf("%s still listed after its removal: %v", old.Name, m)
		}
	}
	// Removing it again: it is not a member.
	if _, err := api(c, p).RemoveClusterMember(ctx(t), connect.NewRequest(&managerv1.RemoveClusterMemberRequest{Node: old.Name})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("remove %s again: %v, want NOT_FOUND", old.Name, err)
	}
	load.checkEverywhere(t)
	tw.check(t)
}

// A member is added and another removed while writes flow.
func TestClusterAddAndRemoveUnderLoad(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Members: 3})
	tw := watchTerms(t, c)
	load := startWriteLoad(t, c, "membership")
	load.waitMore(t, 30)

	m4 := c.AddMember("m4", false)
	for range 2 { // idempotent
		res, err := api(c, c.Member("m2")).AddClusterMember(ctx(t), connect.NewRequest(&managerv1.AddClusterMemberRequest{Node: "m4", By: "test"}))
		if err != nil {
			t.Fatalf("add m4: %v", err)
		}
		if got := res.Msg.GetMembers(); len(got) != 4 {
			t.Errorf("expected members after adding m4: %v", got)
		}
	}
	if _, err := api(c, c.Member("m2")).AddClusterMember(ctx(t), connect.NewRequest(&managerv1.AddClusterMemberRequest{Node: "bad name!"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("add a bad name: %v, want INVALID_ARGUMENT", err)
	}
	m4.Start()
	c.Eventually("m4 to be a voter", func() bool {
		for _, m := range clusterStatus(t, c, c.Member("m1")).GetMembers() {
			if m.GetName() == "m4" && m.GetVoter() && m.GetReachable() {
				return true
			}
		}
		return false
	})
	load.waitMore(t, 30)

	victim := c.Member("m2")
	if victim == c.Primary() {
		victim = c.Member("m3")
	}
	if _, err := api(c, m4).RemoveClusterMember(ctx(t), connect.NewRequest(&managerv1.RemoveClusterMemberRequest{Node: victim.Name})); err != nil {
		t.Fatalf("remove %s: %v", victim.Name, err)
	}
	victim.Stop()
	load.waitMore(t, 30)
	load.checkEverywhere(t)
	tw.check(t)
}

// Every full member answers ListNodes with the primary's live view: the
// workers' streams are held by the primary, and a follower asks it.
func TestClusterListNodesOnFollowers(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Members: 3, Workers: 1})
	for _, m := range c.Members {
		c.Eventually("worker-1 connected as seen through "+m.Name, func() bool {
			nodes, err := m.Client().ListNodes(ctx(t))
			return err == nil && len(nodes) == 1 && nodes[0].GetConnected()
		})
	}
}
