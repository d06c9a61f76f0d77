package state_test

import (
	"bytes"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func cInit(clusterID string, members ...string) *storev1.Command {
	c := &storev1.InitCluster{ClusterId: clusterID}
	for _, m := range members {
		c.Members = append(c.Members, &storev1.MemberRecord{Name: m})
	}
	return &storev1.Command{Cmd: &storev1.Command_InitCluster{InitCluster: c}}
}

const (
	clusterA = "0123456789abcdef0123456789abcdef"
	clusterB = "fedcba9876543210fedcba9876543210"
)

// Issue 12, item 2: the cluster id the boot code stamps into InitCluster is
// the store's, for good: a later InitCluster (another member's boot work,
// a replay) does not change it, a new generation keeps it, and it survives
// a snapshot.
func TestInitClusterRecordsTheClusterID(t *testing.T) {
	f := newFixture(t)
	if got := f.read().ClusterID(); got != "" {
		t.Fatalf("cluster id before InitCluster = %q", got)
	}
	f.must(cInit(clusterA, "m1"))
	if got, gen := f.read().ClusterID(), f.read().Generation(); got != clusterA || gen != 1 {
		t.Fatalf("cluster id %q generation %d, want %s and 1", got, gen, clusterA)
	}
	f.must(cInit(clusterB, "m2"))
	if got, members := f.read().ClusterID(), f.read().ExpectedMembers(); got != clusterA || len(members) != 1 || members[0] != "m1" {
		t.Fatalf("after a second InitCluster: cluster id %q members %v, want %s and [m1]", got, members, clusterA)
	}
	f.must(&storev1.Command{Cmd: &storev1.Command_SetGeneration{SetGeneration: &storev1.SetGeneration{Generation: 2, By: "op"}}})
	if got, gen := f.read().ClusterID(), f.read().Generation(); got != clusterA || gen != 2 {
		t.Fatalf("after a new generation: cluster id %q generation %d", got, gen)
	}

	var buf bytes.Buffer
	if _, err := f.read().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	g := state.New(state.Limits{})
	if _, err := g.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if got := g.Snapshot().ClusterID(); got != clusterA {
		t.Fatalf("restored cluster id = %q, want %s", got, clusterA)
	}
}

// A store initialised before cluster ids (InitCluster without one) gets the
// first id an InitCluster brings, once; its members and generation stay.
func TestClusterIDForAStoreFromBeforeClusterIDs(t *testing.T) {
	f := newFixture(t)
	f.must(cInit("", "m1", "m2"))
	if got := f.read().ClusterID(); got != "" {
		t.Fatalf("cluster id = %q, want none", got)
	}
	f.must(cInit(clusterB))
	f.must(cInit(clusterA))
	r := f.read()
	if got := r.ClusterID(); got != clusterB {
		t.Fatalf("cluster id = %q, want the first recorded %s", got, clusterB)
	}
	if m := r.ExpectedMembers(); len(m) != 2 || r.Generation() != 1 {
		t.Fatalf("members %v generation %d, want [m1 m2] and 1", m, r.Generation())
	}
}

// A cluster id that is not 8-64 characters of [a-z0-9-] is refused and
// changes nothing.
func TestInitClusterRefusesABadClusterID(t *testing.T) {
	for _, id := range []string{"short", "UPPER0123456789", "with space 012345", string(make([]byte, 65))} {
		f := newFixture(t)
		f.refused(cInit(id, "m1"), apierr.InvalidArgument, "clusterId")
	}
}

// Worker notices are written to the history of the job they name, with the
// node that sent them; a notice of a job the store does not have changes
// nothing.
func TestWorkerNoticesGoToTheJobsHistory(t *testing.T) {
	f := newFixture(t)
	f.must(cCreate(jobSpec("job-1")))
	before := len(f.read().Job(nil, "job-1").GetHistory())
	notice := &managerv1.WorkerNotice{JobId: "job-1", Role: "primary", FencingToken: 7, Kind: "removed-orphan", Message: "stopped and removed services main"}
	res := f.must(&storev1.Command{Cmd: &storev1.Command_InstanceReports{InstanceReports: &storev1.InstanceReports{
		NodeId: "n1", Notices: []*managerv1.WorkerNotice{notice, {JobId: "nobody", Kind: "kept-unlabelled", Message: "x"}},
	}}})
	h := f.read().Job(nil, "job-1").GetHistory()
	if len(h) != before+1 {
		t.Fatalf("history has %d entries, want %d", len(h), before+1)
	}
	n := h[0].GetNotice()
	if n == nil || n.GetKind() != "removed-orphan" || n.GetMessage() != notice.GetMessage() ||
		n.GetInstance().GetNodeId() != "n1" || n.GetInstance().GetRole() != "primary" || n.GetInstance().GetFencingToken() != 7 {
		t.Fatalf("newest entry = %v", h[0])
	}
	if len(res.Events) != 1 || res.Events[0].GetJobUpdated() == nil {
		t.Errorf("events = %v, want one jobUpdated", res.Events)
	}
	if f.read().Job(nil, "nobody") != nil {
		t.Error("a notice made a job")
	}
}
