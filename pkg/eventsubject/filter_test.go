package eventsubject_test

import (
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/eventsubject"
)

func TestFilter(t *testing.T) {
	t.Parallel()
	job := func(id, bundle string, nodes ...string) *managerv1.Event {
		j := &managerv1.JobWithHistory{Job: &managerv1.Job{JobId: id}}
		if bundle != "" {
			j.Job.Tags = map[string]string{"bundleId": bundle}
		}
		for _, n := range nodes {
			j.Instances = append(j.Instances, &managerv1.Instance{NodeId: n})
		}
		return &managerv1.Event{Kind: &managerv1.Event_JobUpdated{JobUpdated: &managerv1.JobEvent{Job: j}}}
	}
	nodeLost := &managerv1.Event{Kind: &managerv1.Event_NodeLost{NodeLost: &managerv1.NodeEvent{Node: &managerv1.Node{NodeId: "n1"}}}}
	complete := &managerv1.Event{Kind: &managerv1.Event_InitialDataComplete{InitialDataComplete: &managerv1.InitialDataComplete{}}}
	for _, tc := range []struct {
		name string
		req  *managerv1.EventStreamRequest
		ev   *managerv1.Event
		want bool
	}{
		{"none", &managerv1.EventStreamRequest{}, nodeLost, true},
		{"kind match", &managerv1.EventStreamRequest{Kinds: []string{"node_lost"}}, nodeLost, true},
		{"kind miss", &managerv1.EventStreamRequest{Kinds: []string{"node_online"}}, nodeLost, false},
		{"complete passes", &managerv1.EventStreamRequest{Kinds: []string{"node_online"}, JobIds: []string{"x"}}, complete, true},
		{"job match", &managerv1.EventStreamRequest{JobIds: []string{"a", "b"}}, job("b", ""), true},
		{"job miss", &managerv1.EventStreamRequest{JobIds: []string{"a"}}, job("b", ""), false},
		{"job filter drops node events", &managerv1.EventStreamRequest{JobIds: []string{"a"}}, nodeLost, false},
		{"node of an instance", &managerv1.EventStreamRequest{NodeIds: []string{"n2"}}, job("a", "", "n1", "n2"), true},
		{"node miss", &managerv1.EventStreamRequest{NodeIds: []string{"n3"}}, job("a", "", "n1", "n2"), false},
		{"node event", &managerv1.EventStreamRequest{NodeIds: []string{"n1"}}, nodeLost, true},
		{"bundle of a job", &managerv1.EventStreamRequest{BundleIds: []string{"bu"}}, job("a", "bu"), true},
		{"bundle miss", &managerv1.EventStreamRequest{BundleIds: []string{"bu"}}, job("a", ""), false},
		{"all dimensions", &managerv1.EventStreamRequest{Kinds: []string{"job_updated"}, JobIds: []string{"a"}, NodeIds: []string{"n1"}, BundleIds: []string{"bu"}}, job("a", "bu", "n1"), true},
		{"one dimension misses", &managerv1.EventStreamRequest{Kinds: []string{"job_updated"}, JobIds: []string{"a"}, NodeIds: []string{"n9"}}, job("a", "bu", "n1"), false},
	} {
		f, err := eventsubject.NewFilter(tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := f.Match(tc.ev); got != tc.want {
			t.Errorf("%s: Match = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFilterInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		req  *managerv1.EventStreamRequest
		want string
	}{
		{&managerv1.EventStreamRequest{Kinds: []string{"job_created", "jobcreated"}}, `kinds[1]: unknown event kind "jobcreated"`},
		{&managerv1.EventStreamRequest{JobIds: []string{""}}, "job_ids[0]: must not be empty"},
		{&managerv1.EventStreamRequest{NodeIds: []string{"a", ""}}, "node_ids[1]"},
		{&managerv1.EventStreamRequest{BundleIds: []string{""}}, "bundle_ids[0]"},
	} {
		if _, err := eventsubject.NewFilter(tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewFilter(%v) = %v, want an error containing %q", tc.req, err, tc.want)
		}
	}
}

// A kind without a case of its own (one added to the proto later) is read
// from its message's id fields: the fallback, checked on a message that has
// a node_id.
func TestOfUnlistedKindReadsIDFields(t *testing.T) {
	t.Parallel()
	ev := &managerv1.Event{Kind: &managerv1.Event_LeaseStatus{LeaseStatus: &managerv1.LeaseStatus{}}}
	if s := eventsubject.Of(ev); s.JobID != "" || len(s.NodeIDs) != 0 {
		t.Errorf("Of(lease_status) = %+v, want nothing", s)
	}
	s := eventsubject.OfFieldsForTest(&managerv1.Event{Kind: &managerv1.Event_NodeSnapshot{NodeSnapshot: &managerv1.Node{NodeId: "n7"}}})
	if len(s.NodeIDs) != 1 || s.NodeIDs[0] != "n7" {
		t.Errorf("fromFields(node_snapshot) = %+v, want node n7", s)
	}
}
