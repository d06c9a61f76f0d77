package automanager

import (
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// TestTemplateMemo checks that a roll compares a job with its template
// again exactly when the job or the bundle message is a new one, and
// answers as a roll without the memo does.
func TestTemplateMemo(t *testing.T) {
	t.Parallel()
	b := bundle("news", true)
	jobs := map[string]*managerv1.JobWithHistory{}
	for _, jh := range jobsOf(b) {
		jobs[jh.GetJob().GetJobId()] = jh
	}
	updates := func(b *managerv1.Bundle, m *templateMemo) int {
		n := 0
		for _, a := range roll(b, jobs, nil, m) {
			if a.Kind == ActUpdateJob {
				n++
			}
		}
		return n
	}
	m := newTemplateMemo()
	if n := updates(b, m); n != 0 || len(m.same) != len(jobs) {
		t.Fatalf("first roll: %d updates, %d remembered; want 0 and %d", n, len(m.same), len(jobs))
	}

	// The same messages: the memo answers without comparing. Shown by
	// breaking the rule it rests on — the bundle changed in place is
	// not seen, as it is by a roll without the memo.
	desc := b.GetJobs()[0].GetJob().GetDescription()
	b.Jobs[0].Job.Description = "changed in place"
	if n := updates(b, m); n != 0 {
		t.Errorf("same messages: %d updates, want the memo's answer (0)", n)
	}
	if n := updates(b, nil); n != len(jobs) {
		t.Errorf("without the memo: %d updates, want %d", n, len(jobs))
	}
	b.Jobs[0].Job.Description = desc

	// A new bundle message with a changed template: compared again.
	nb := proto.Clone(b).(*managerv1.Bundle)
	nb.Jobs[0].Job.Description = "v2"
	if n := updates(nb, m); n != len(jobs) {
		t.Errorf("new template: %d updates, want %d", n, len(jobs))
	}

	// A new job message (a stored row replaced) under the old bundle:
	// compared again, found the same, remembered by its new identity.
	for id, jh := range jobs {
		jobs[id] = &managerv1.JobWithHistory{Job: proto.Clone(jh.GetJob()).(*managerv1.Job)}
	}
	if n := updates(b, m); n != 0 {
		t.Fatalf("new job messages: %d updates, want 0", n)
	}
	for id, p := range m.same {
		if p.job != jobs[id].GetJob() || p.bundle != b {
			t.Errorf("%s remembered by an old message", id)
		}
	}
	var kept string
	for id := range jobs {
		kept = id
		break
	}
	m.keep(func(id string) bool { return id == kept })
	if _, ok := m.same[kept]; len(m.same) != 1 || !ok {
		t.Errorf("keep(%s) left %d jobs", kept, len(m.same))
	}
}
