package state_test

import (
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

func cCreateBundle(b *managerv1.Bundle) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_CreateBundle{CreateBundle: &storev1.CreateBundle{Bundle: b}}}
}

// viewOf is the bundle's view of job jobID.
func viewOf(t *testing.T, f *fixture, bundleID, jobID string) *managerv1.BundleJobStatus {
	t.Helper()
	v := f.read().BundleView(f.read().Bundle(nil, bundleID))
	for _, j := range v.GetJobs() {
		if j.GetJobId() == jobID {
			return j
		}
	}
	t.Fatalf("bundle %s has no job %s: %v", bundleID, jobID, v)
	return nil
}

// A bundle no node's runtime can run is stored, and its view says why
// each job runs nowhere (issue 12 item 11); a node whose runtime can
// run it takes the explanation away.
func TestBundleViewExplainsRuntime(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("p1") // a process worker
	b := &managerv1.Bundle{BundleId: "img", Jobs: []*managerv1.BundleJobSpec{{
		JobName: "channel", Job: &managerv1.Job{Services: []*managerv1.Service{{Name: "main", Image: "enc:1"}}},
	}}}
	f.must(cCreateBundle(b))
	st := viewOf(t, f, "img", "img.channel.0")
	if len(st.GetDegradations()) != 1 || !strings.HasPrefix(st.GetDegradations()[0],
		`runtime: no node's runtime can run the job: runtime process cannot run image-only services (process runs commands): "main" has an image and no command`) {
		t.Fatalf("degradations = %q, want the runtime explained", st.GetDegradations())
	}

	// An older worker that does not say its runtime may run it.
	f.registerNode("old")
	f.must(&storev1.Command{Cmd: &storev1.Command_MemberRegister{MemberRegister: &storev1.MemberRegister{
		Token: "tok-old", NodeSecret: "sec-old", Address: "old.local:7000", Hardware: &managerv1.Hardware{Vcpus: 4},
	}}})
	if st := viewOf(t, f, "img", "img.channel.0"); len(st.GetDegradations()) != 0 {
		t.Errorf("with a node that does not say its runtime: degradations %q, want none", st.GetDegradations())
	}
}

// A repair under way is shown on the replica it moves (issue 12 item 9).
func TestBundleViewShowsRepair(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	f.onlineNode("n2")
	b := &managerv1.Bundle{BundleId: "news", Jobs: []*managerv1.BundleJobSpec{{
		JobName: "channel", Job: &managerv1.Job{Services: []*managerv1.Service{{Name: "main", Command: []string{"./enc"}}}},
	}}, ResiliencePolicy: &managerv1.ResiliencePolicy{SameNode: managerv1.AntiAffinity_ANTI_AFFINITY_FORBID}}
	f.must(cCreateBundle(b))
	f.running("news.channel.0", "primary", "n1")
	f.running("news.channel.1", "backup", "n1")
	if st := viewOf(t, f, "news", "news.channel.1"); len(st.GetDegradations()) != 0 {
		t.Fatalf("degradations %q before any repair (bound without a placement)", st.GetDegradations())
	}
	m := &managerv1.MigrationState{MigrationId: "0123abcd-1", SourceJobId: "news.channel.1", SourceRole: "backup", TargetRole: "backup@0123abcd",
		TargetNodeId: "n2", Phase: managerv1.MigrationPhase_MIGRATION_PHASE_LAUNCHING, StartedAt: stamp(1),
		Repair: true, Reason: "antiAffinity.sameNode: the backup shares n1 with the primary"}
	f.must(cPutMigration(m, 0, true))
	st := viewOf(t, f, "news", "news.channel.1")
	want := "repair: antiAffinity.sameNode: the backup shares n1 with the primary (migration 0123abcd-1 to n2, launching)"
	if len(st.GetDegradations()) != 1 || st.GetDegradations()[0] != want {
		t.Errorf("degradations = %q, want %q", st.GetDegradations(), want)
	}
	if st := viewOf(t, f, "news", "news.channel.0"); len(st.GetDegradations()) != 0 {
		t.Errorf("the primary shows %q; the repair moves the backup", st.GetDegradations())
	}
}
