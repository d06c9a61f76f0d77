package tests

import (
	"errors"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// The SDK's habits against a real Manager: a stream opened before an act
// sees it, filtered by the Manager to one bundle; WaitForJob and
// WaitForMigration follow a bundle job's placement and its migration.
func TestSDKWaitsAndFilteredStream(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2})
	cl, x := c.Client(), ctx(t)

	s := cl.EventStream(x, norsk.EventStreamSettings{SkipSnapshot: true, BundleIDs: []string{"wb"}})
	defer s.Close()
	other := &norsk.Bundle{BundleId: "other", Jobs: []*norsk.BundleJobSpec{{JobName: "ch",
		Requirements: &norsk.JobRequirements{RequiredCapacity: 0.1}, Job: progJob(t, "", runtimetest.Behaviour{}, nil)}}}
	if _, err := cl.CreateBundle(x, other); err != nil {
		t.Fatal(err)
	}
	wb := &norsk.Bundle{BundleId: "wb", Jobs: []*norsk.BundleJobSpec{{JobName: "ch",
		Requirements: &norsk.JobRequirements{RequiredCapacity: 0.1}, Job: progJob(t, "", runtimetest.Behaviour{}, nil)}}}
	if _, err := cl.CreateBundle(x, wb); err != nil {
		t.Fatal(err)
	}
	const job = "wb.ch.0"
	jh, err := cl.WaitForJob(x, job, "primary", norsk.InstancePhaseRunning)
	if err != nil {
		t.Fatalf("WaitForJob(running) = %v", err)
	}
	if in := testcluster.Instance(jh, "primary"); in.GetNodeId() == "" {
		t.Fatalf("running primary without a node: %v", in)
	}

	// The stream saw the bundle from its creation, and nothing else.
	sawCreated, sawRunning := false, false
	for !sawRunning {
		if !s.Next() {
			t.Fatalf("stream ended: %v", s.Err())
		}
		ev := s.Event()
		if got := norsk.EventBundleID(ev); got != "wb" {
			t.Fatalf("filtered stream delivered %s about bundle %q", norsk.EventKindOf(ev), got)
		}
		sawCreated = sawCreated || norsk.EventKindOf(ev) == norsk.EventKindBundleCreated
		if j := norsk.EventJob(ev); j != nil && testcluster.Instance(j, "primary").GetPhase() == norsk.InstancePhaseRunning {
			sawRunning = true
		}
	}
	if !sawCreated {
		t.Errorf("the stream opened before CreateBundle missed bundle_created")
	}

	st, err := cl.MigrateJob(x, job, norsk.MigrateOptions{Strategy: norsk.StrategyOverlap})
	if err != nil {
		t.Fatalf("MigrateJob: %v", err)
	}
	st, err = cl.WaitForMigration(x, st.GetMigrationId())
	if err != nil || st.GetPhase() != norsk.PhaseDone {
		t.Fatalf("WaitForMigration = %v, %v; want done", st, err)
	}
	if _, err := cl.WaitForJob(x, job, st.GetTargetRole(), norsk.InstancePhaseRunning); err != nil {
		t.Errorf("WaitForJob(target running) = %v", err)
	}

	bad := cl.EventStream(x, norsk.EventStreamSettings{JobIDs: []string{""}})
	defer bad.Close()
	if bad.Next() {
		t.Fatalf("a stream with an empty job id filter delivered an event")
	}
	if err := bad.Err(); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("Err = %v, want ErrInvalidArgument", err)
	}
}
