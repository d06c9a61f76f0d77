// Package eventstest makes the events the Manager's benchmarks publish: a
// job's running entry as the simulator's jobs raise it, so that the
// broker's benchmarks (internal/events) and the event-delivery benchmark
// (bench) measure the same event. Only tests and benchmarks import it.
package eventstest

import (
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// JobRunning is job n's running entry at index (the job, its one instance
// and its placement: about 380 bytes encoded), stamped ts. Jobs are named
// as the simulator's bundles name them, ten to a bundle, on 1,000 nodes.
func JobRunning(n int, index uint64, ts *timestamppb.Timestamp) *managerv1.Event {
	jobID := fmt.Sprintf("bench-b%06d.j%02d.0", n/10, n%10)
	node := fmt.Sprintf("bench-n%05d", n%1000)
	return &managerv1.Event{Index: index, Timestamp: ts, Kind: &managerv1.Event_JobUpdated{JobUpdated: &managerv1.JobEvent{
		Job: &managerv1.JobWithHistory{
			Job: &managerv1.Job{
				JobId:         jobID,
				Tags:          map[string]string{"bundleId": jobID[:13], "jobName": jobID[14:17], "replicaIndex": "0"},
				State:         managerv1.JobState_JOB_STATE_ACTIVE,
				Services:      []*managerv1.Service{{Name: "svc", Command: []string{"/bin/sim"}}},
				AutoPlacement: &managerv1.AutoPlacement{Requirements: &managerv1.JobRequirements{RequiredCapacity: 0.1}},
				CurrentHash:   index - 4,
			},
			Instances: []*managerv1.Instance{{
				JobId: jobID, Role: "primary", NodeId: node, FencingToken: index - 1,
				Desired: managerv1.InstanceDesired_INSTANCE_DESIRED_RUNNING, Phase: managerv1.InstancePhase_INSTANCE_PHASE_RUNNING,
				RuntimeRole: "primary", BoundAt: ts, JobHash: index - 4,
				Placement: &managerv1.PlacementEvent{JobId: jobID, Role: "primary", NodeId: node, FencingToken: index - 1,
					Kind: "first", Summary: "placed on " + node + " (tier 0); 20 eligible"},
			}},
		},
		Entry: &managerv1.JobHistoryEntry{Timestamp: ts, Index: index, Event: &managerv1.JobHistoryEntry_Running{
			Running: &managerv1.InstanceRunning{Instance: &managerv1.InstanceRef{Role: "primary", NodeId: node, FencingToken: index - 1}},
		}},
	}}}
}
