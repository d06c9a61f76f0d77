package events_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/events"
)

// jobEvent is a job's running entry as the simulator's jobs raise it (the
// job, its one instance and its placement: about 380 bytes encoded, as in
// bench.deliveryEvent), for job n at index.
func jobEvent(n int, index uint64, ts *timestamppb.Timestamp) *managerv1.Event {
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

// benchEvents are the events a Publish benchmark publishes, made before
// its timer starts: 4 to an index, as a bundle's command raises several.
func benchEvents(n int) []*managerv1.Event {
	ts := timestamppb.New(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	out := make([]*managerv1.Event, n)
	for i := range out {
		out[i] = jobEvent(i, uint64(i/4+1), ts)
	}
	return out
}

// BenchmarkPublish measures Publish of one job event at a time with no
// subscriber: ring=65536 is a ring of a fixed count, full, evicting one
// event per event published.
func BenchmarkPublish(b *testing.B) {
	b.Run("ring=65536", func(b *testing.B) {
		published := benchEvents(b.N)
		br := events.New(65536)
		defer br.Close()
		b.ReportAllocs()
		b.ResetTimer()
		for _, e := range published {
			br.Publish(e)
		}
	})
}
