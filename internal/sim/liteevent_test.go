package sim

import (
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// The lite decoding reads of an encoded Event what a full decode would
// give the subscriber, whatever else the event carries.
func TestLiteEventReadsWhatAFullDecodeWould(t *testing.T) {
	t.Parallel()
	ts := timestamppb.New(time.Unix(1796314576, 299901686))
	job := func(id string, phase managerv1.InstancePhase) *managerv1.JobWithHistory {
		return &managerv1.JobWithHistory{
			Job: &managerv1.Job{JobId: id, Tags: map[string]string{"bundleId": "sim-b000000", "jobName": "j00"},
				Services: []*managerv1.Service{{Name: "svc", Command: []string{"/bin/sim"}}}, CurrentHash: 81},
			History:   []*managerv1.JobHistoryEntry{{Timestamp: ts, Index: 80, Event: &managerv1.JobHistoryEntry_Created{Created: &managerv1.JobCreated{}}}},
			Instances: []*managerv1.Instance{{JobId: id, Role: "primary", NodeId: "sim-n00000", FencingToken: 84, Phase: phase}},
		}
	}
	running := &managerv1.JobHistoryEntry{Timestamp: ts, Index: 85, Event: &managerv1.JobHistoryEntry_Running{Running: &managerv1.InstanceRunning{
		Instance: &managerv1.InstanceRef{Role: "primary", NodeId: "sim-n00000", FencingToken: 84}}}}
	created := &managerv1.JobHistoryEntry{Timestamp: ts, Index: 80, Event: &managerv1.JobHistoryEntry_Created{Created: &managerv1.JobCreated{}}}
	cases := []struct {
		name string
		ev   *managerv1.Event
	}{
		{"running entry", &managerv1.Event{Index: 85, Timestamp: ts, Kind: &managerv1.Event_JobUpdated{JobUpdated: &managerv1.JobEvent{
			Job: job("sim-b000000.j00.0", managerv1.InstancePhase_INSTANCE_PHASE_RUNNING), Entry: running}}}},
		{"another entry", &managerv1.Event{Index: 86, Timestamp: ts, Kind: &managerv1.Event_JobUpdated{JobUpdated: &managerv1.JobEvent{
			Job: job("sim-b000000.j00.1", managerv1.InstancePhase_INSTANCE_PHASE_RUNNING), Entry: created}}}},
		{"no entry", &managerv1.Event{Index: 87, Timestamp: ts, Kind: &managerv1.Event_JobUpdated{JobUpdated: &managerv1.JobEvent{
			Job: job("sim-b000000.j00.2", managerv1.InstancePhase_INSTANCE_PHASE_RUNNING)}}}},
		{"job created", &managerv1.Event{Index: 80, Timestamp: ts, Kind: &managerv1.Event_JobCreated{JobCreated: &managerv1.JobEvent{
			Job: job("sim-b000000.j00.3", managerv1.InstancePhase_INSTANCE_PHASE_UNSPECIFIED), Entry: created}}}},
		{"snapshot running", &managerv1.Event{Index: 90, Timestamp: ts, Kind: &managerv1.Event_JobSnapshot{
			JobSnapshot: job("sim-b000001.j00.0", managerv1.InstancePhase_INSTANCE_PHASE_RUNNING)}}},
		{"snapshot prepared", &managerv1.Event{Index: 90, Timestamp: ts, Kind: &managerv1.Event_JobSnapshot{
			JobSnapshot: job("sim-b000001.j00.1", managerv1.InstancePhase_INSTANCE_PHASE_PREPARED)}}},
		{"initial data complete", &managerv1.Event{Index: 90, Timestamp: ts, Kind: &managerv1.Event_InitialDataComplete{
			InitialDataComplete: &managerv1.InitialDataComplete{Index: 90}}}},
		{"resync", &managerv1.Event{Index: 91, Kind: &managerv1.Event_InitialDataComplete{
			InitialDataComplete: &managerv1.InitialDataComplete{Index: 91, Resync: true}}}},
		{"placement", &managerv1.Event{Index: 84, Timestamp: ts, Kind: &managerv1.Event_Placement{Placement: &managerv1.PlacementEvent{
			JobId: "sim-b000000.j00.0", Role: "primary", NodeId: "sim-n00000"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := proto.Marshal(tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			// A field this decoder does not know (a newer Manager's) is
			// skipped.
			b = protowire.AppendTag(b, 999, protowire.BytesType)
			b = protowire.AppendBytes(b, []byte("unknown"))
			var got liteEvent
			if err := decodeLiteEvent(b, &got); err != nil {
				t.Fatal(err)
			}
			if got != want(tc.ev) {
				t.Errorf("decoded %+v, want %+v", got, want(tc.ev))
			}
		})
	}
}

// want is what a subscriber reads of ev by a full decode.
func want(ev *managerv1.Event) liteEvent {
	w := liteEvent{index: ev.GetIndex()}
	if ts := ev.GetTimestamp(); ts != nil {
		w.timestamp = ts.AsTime()
	}
	if idc := ev.GetInitialDataComplete(); idc != nil {
		w.initialDataComplete, w.resync = true, idc.GetResync()
	}
	if ju := ev.GetJobUpdated(); ju != nil && ju.GetEntry().GetRunning() != nil {
		w.runningJobID = ju.GetJob().GetJob().GetJobId()
	}
	for _, in := range ev.GetJobSnapshot().GetInstances() {
		if in.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_RUNNING {
			w.snapshotRunningJobID = ev.GetJobSnapshot().GetJob().GetJobId()
		}
	}
	return w
}

func TestLiteEventRefusesMalformedInput(t *testing.T) {
	t.Parallel()
	b, err := proto.Marshal(&managerv1.Event{Index: 1, Kind: &managerv1.Event_JobUpdated{JobUpdated: &managerv1.JobEvent{
		Job: &managerv1.JobWithHistory{Job: &managerv1.Job{JobId: "a"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n < len(b); n++ {
		var ev liteEvent
		if err := decodeLiteEvent(b[:n], &ev); err == nil && proto.Unmarshal(b[:n], &managerv1.Event{}) != nil {
			t.Errorf("%d of %d bytes: decoded without an error a full decode refuses", n, len(b))
		}
	}
}

// BenchmarkEventDecode: what a subscriber spends decoding one job event as
// the simulator's jobs raise it, fully (as the SDK does) and lite.
func BenchmarkEventDecode(b *testing.B) {
	ts := timestamppb.Now()
	ev := &managerv1.Event{Index: 85, Timestamp: ts, Kind: &managerv1.Event_JobUpdated{JobUpdated: &managerv1.JobEvent{
		Job: &managerv1.JobWithHistory{
			Job: &managerv1.Job{JobId: "sim-b000000.j00.0", Tags: map[string]string{"bundleId": "sim-b000000", "jobName": "j00", "replicaIndex": "0"},
				State: managerv1.JobState_JOB_STATE_ACTIVE, Services: []*managerv1.Service{{Name: "svc", Command: []string{"/bin/sim"}}},
				AutoPlacement: &managerv1.AutoPlacement{Requirements: &managerv1.JobRequirements{RequiredCapacity: 0.1}}, CurrentHash: 81},
			Instances: []*managerv1.Instance{{JobId: "sim-b000000.j00.0", Role: "primary", NodeId: "sim-n00000", FencingToken: 84,
				Phase: managerv1.InstancePhase_INSTANCE_PHASE_RUNNING, RuntimeRole: "primary", BoundAt: ts, JobHash: 81,
				Placement: &managerv1.PlacementEvent{JobId: "sim-b000000.j00.0", Role: "primary", NodeId: "sim-n00000", FencingToken: 84,
					Kind: "first", Summary: "placed on sim-n00000 (tier 0); 20 eligible"}}},
		},
		Entry: &managerv1.JobHistoryEntry{Timestamp: ts, Index: 85, Event: &managerv1.JobHistoryEntry_Running{Running: &managerv1.InstanceRunning{
			Instance: &managerv1.InstanceRef{Role: "primary", NodeId: "sim-n00000", FencingToken: 84}}}},
	}}}
	wire, err := proto.Marshal(ev)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e managerv1.Event
			if err := proto.Unmarshal(wire, &e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lite", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e liteEvent
			if err := decodeLiteEvent(wire, &e); err != nil {
				b.Fatal(err)
			}
		}
	})
}
