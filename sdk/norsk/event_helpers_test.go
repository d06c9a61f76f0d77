package norsk_test

import (
	"slices"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

func TestEventHelpers(t *testing.T) {
	t.Parallel()
	job := &managerv1.JobWithHistory{
		Job:       &managerv1.Job{JobId: "j", Tags: map[string]string{"bundleId": "b"}},
		Instances: []*managerv1.Instance{{NodeId: "n1", MigrationId: "m"}, {NodeId: "n2"}, {NodeId: "n1"}},
	}
	node := &managerv1.Node{NodeId: "n"}
	bundle := &managerv1.Bundle{BundleId: "b"}
	mig := &managerv1.MigrationState{MigrationId: "m", SourceJobId: "j", SourceNodeId: "n1", TargetNodeId: "n2"}
	step := &managerv1.MigrationEvent{MigrationId: "m", JobKey: &managerv1.JobKey{JobId: "j"}, NodeId: "n2"}
	for _, tc := range []struct {
		ev        *managerv1.Event
		kind      norsk.EventKind
		jobID     string
		nodes     []string
		bundleID  string
		migID     string
		hasJob    bool
		hasNode   bool
		hasBundle bool
		hasMig    bool
		hasStep   bool
	}{
		{ev: nil},
		{ev: &managerv1.Event{}},
		{ev: &managerv1.Event{Kind: &managerv1.Event_JobCreated{JobCreated: &managerv1.JobEvent{Job: job}}},
			kind: norsk.EventKindJobCreated, jobID: "j", nodes: []string{"n1", "n2"}, bundleID: "b", migID: "m", hasJob: true},
		{ev: &managerv1.Event{Kind: &managerv1.Event_JobSnapshot{JobSnapshot: job}},
			kind: norsk.EventKindJobSnapshot, jobID: "j", nodes: []string{"n1", "n2"}, bundleID: "b", migID: "m", hasJob: true},
		{ev: &managerv1.Event{Kind: &managerv1.Event_JobDeleted{JobDeleted: &managerv1.JobDeleted{JobId: "j"}}},
			kind: norsk.EventKindJobDeleted, jobID: "j"},
		{ev: &managerv1.Event{Kind: &managerv1.Event_NodeLost{NodeLost: &managerv1.NodeEvent{Node: node}}},
			kind: norsk.EventKindNodeLost, nodes: []string{"n"}, hasNode: true},
		{ev: &managerv1.Event{Kind: &managerv1.Event_BundleUpdated{BundleUpdated: &managerv1.BundleEvent{Bundle: bundle}}},
			kind: norsk.EventKindBundleUpdated, bundleID: "b", hasBundle: true},
		{ev: &managerv1.Event{Kind: &managerv1.Event_BundleDeleted{BundleDeleted: &managerv1.BundleDeleted{BundleId: "b"}}},
			kind: norsk.EventKindBundleDeleted, bundleID: "b"},
		{ev: &managerv1.Event{Kind: &managerv1.Event_MigrationUpdated{MigrationUpdated: mig}},
			kind: norsk.EventKindMigrationUpdated, jobID: "j", nodes: []string{"n1", "n2"}, migID: "m", hasMig: true},
		{ev: &managerv1.Event{Kind: &managerv1.Event_MigrationTargetReady{MigrationTargetReady: step}},
			kind: norsk.EventKindMigrationTargetReady, jobID: "j", nodes: []string{"n2"}, migID: "m", hasStep: true},
		{ev: &managerv1.Event{Kind: &managerv1.Event_Placement{Placement: &managerv1.PlacementEvent{JobId: "j", NodeId: "n2", FailedNodeId: "n1"}}},
			kind: norsk.EventKindPlacement, jobID: "j", nodes: []string{"n2", "n1"}},
		{ev: &managerv1.Event{Kind: &managerv1.Event_LeaseStatus{LeaseStatus: &managerv1.LeaseStatus{}}},
			kind: norsk.EventKindLeaseStatus},
	} {
		ev := tc.ev
		if got := norsk.EventKindOf(ev); got != tc.kind {
			t.Errorf("EventKindOf(%v) = %q, want %q", ev, got, tc.kind)
		}
		if got := norsk.EventJobID(ev); got != tc.jobID {
			t.Errorf("EventJobID(%v) = %q, want %q", ev, got, tc.jobID)
		}
		if got := norsk.EventNodeIDs(ev); !slices.Equal(got, tc.nodes) {
			t.Errorf("EventNodeIDs(%v) = %q, want %q", ev, got, tc.nodes)
		}
		if got := norsk.EventBundleID(ev); got != tc.bundleID {
			t.Errorf("EventBundleID(%v) = %q, want %q", ev, got, tc.bundleID)
		}
		if got := norsk.EventMigrationID(ev); got != tc.migID {
			t.Errorf("EventMigrationID(%v) = %q, want %q", ev, got, tc.migID)
		}
		if got := norsk.EventJob(ev) != nil; got != tc.hasJob {
			t.Errorf("EventJob(%v) != nil is %v", ev, got)
		}
		if got := norsk.EventNode(ev) != nil; got != tc.hasNode {
			t.Errorf("EventNode(%v) != nil is %v", ev, got)
		}
		if got := norsk.EventBundle(ev) != nil; got != tc.hasBundle {
			t.Errorf("EventBundle(%v) != nil is %v", ev, got)
		}
		if got := norsk.EventMigration(ev) != nil; got != tc.hasMig {
			t.Errorf("EventMigration(%v) != nil is %v", ev, got)
		}
		if got := norsk.EventMigrationStep(ev) != nil; got != tc.hasStep {
			t.Errorf("EventMigrationStep(%v) != nil is %v", ev, got)
		}
	}
}

// Every constant names a kind of the proto.
func TestEventKindsNamed(t *testing.T) {
	t.Parallel()
	kinds := norsk.EventKinds()
	for _, k := range []norsk.EventKind{
		norsk.EventKindJobSnapshot, norsk.EventKindNodeSnapshot, norsk.EventKindInitialDataComplete,
		norsk.EventKindJobCreated, norsk.EventKindJobUpdated, norsk.EventKindJobDeleted,
		norsk.EventKindNodeOnline, norsk.EventKindNodeLost, norsk.EventKindNodeStopping,
		norsk.EventKindNodeTerminated, norsk.EventKindNodeTagsUpdated,
		norsk.EventKindClusterSlotRegistered, norsk.EventKindClusterSlotUpdated, norsk.EventKindClusterSlotDeregistered,
		norsk.EventKindBundleCreated, norsk.EventKindBundleUpdated, norsk.EventKindBundleDeleted,
		norsk.EventKindPlacement, norsk.EventKindLeaseStatus,
		norsk.EventKindMigrationState, norsk.EventKindMigrationInitialStateDelivered, norsk.EventKindMigrationTargetReady,
		norsk.EventKindMigrationSourceStoppedOutput, norsk.EventKindMigrationTargetApplied, norsk.EventKindMigrationAborted,
		norsk.EventKindMigrationUpdated, norsk.EventKindMigrationForgotten,
	} {
		if !slices.Contains(kinds, k) {
			t.Errorf("EventKind %q is not a kind of the proto (%v)", k, kinds)
		}
	}
}
