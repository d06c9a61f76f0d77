package state

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// TestShallowCopy checks that the copy equals the original field for field,
// shares what fields point to, and that assigning a field of the copy
// leaves the original as it was.
func TestShallowCopy(t *testing.T) {
	t.Parallel()
	job := &managerv1.Job{
		JobId:         "j",
		Description:   "d",
		Tags:          map[string]string{"a": "b"},
		Services:      []*managerv1.Service{{Name: "main", Image: "img:1"}},
		State:         managerv1.JobState_JOB_STATE_PRE,
		TerminalState: &managerv1.TerminalState{Kind: managerv1.TerminalKind_TERMINAL_KIND_FAILED, At: &timestamppb.Timestamp{Seconds: 1}},
		CurrentHash:   7,
	}
	job.ProtoReflect().SetUnknown([]byte{0xf8, 0x07, 0x01}) // field 127, varint 1
	orig := proto.Clone(job)

	c := shallowCopy(job)
	if !proto.Equal(c, job) {
		t.Fatalf("copy %v, want %v", c, job)
	}
	if string(c.ProtoReflect().GetUnknown()) != string(job.ProtoReflect().GetUnknown()) {
		t.Errorf("unknown fields not copied")
	}
	if c.GetServices()[0] != job.GetServices()[0] || c.GetTerminalState() != job.GetTerminalState() {
		t.Errorf("sub-messages were copied, want them shared")
	}
	c.State = managerv1.JobState_JOB_STATE_ACTIVE
	c.TerminalState = nil
	c.Tags = map[string]string{"x": "y"}
	c.Services = nil
	if !proto.Equal(job, orig) {
		t.Errorf("assigning the copy's fields changed the original: %v, want %v", job, orig)
	}

	// A oneof.
	e := &managerv1.JobHistoryEntry{Index: 3, Event: &managerv1.JobHistoryEntry_Completed{Completed: &managerv1.JobCompleted{}}}
	if ce := shallowCopy(e); !proto.Equal(ce, e) || ce.GetCompleted() != e.GetCompleted() {
		t.Errorf("oneof copy %v, want %v sharing its message", ce, e)
	}
}
