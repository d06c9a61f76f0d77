package state_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func TestCreateJob(t *testing.T) {
	f := newFixture(t)
	spec := jobSpec("job-1")
	// Fields the Manager owns are ignored on create.
	spec.State = managerv1.JobState_JOB_STATE_POST
	spec.CurrentHash = 99
	spec.TerminalState = &managerv1.TerminalState{Kind: managerv1.TerminalKind_TERMINAL_KIND_FAILED}
	res := f.must(cCreate(spec))
	idx := f.index

	rec := f.read().Job(nil, "job-1")
	if rec == nil {
		t.Fatal("job not stored")
	}
	j := rec.GetJob()
	if j.GetState() != managerv1.JobState_JOB_STATE_PRE || j.GetCurrentHash() != idx || j.GetTerminalState() != nil {
		t.Errorf("job = state %v hash %d terminal %v; want PRE, %d, none", j.GetState(), j.GetCurrentHash(), j.GetTerminalState(), idx)
	}
	if rec.GetCreateIndex() != idx || rec.GetModifyIndex() != idx {
		t.Errorf("create/modify index = %d/%d, want %d", rec.GetCreateIndex(), rec.GetModifyIndex(), idx)
	}
	if !proto.Equal(rec.GetCreatedAt(), stamp(idx)) || !proto.Equal(rec.GetUpdatedAt(), stamp(idx)) {
		t.Errorf("created/updated at = %v/%v, want %v", rec.GetCreatedAt(), rec.GetUpdatedAt(), stamp(idx))
	}
	if got := entryKinds(rec.GetHistory()); got != "created" {
		t.Fatalf("history = %s, want created", got)
	}
	e := rec.GetHistory()[0]
	if e.GetIndex() != idx || !proto.Equal(e.GetTimestamp(), stamp(idx)) {
		t.Errorf("created entry at %d %v, want %d %v", e.GetIndex(), e.GetTimestamp(), idx, stamp(idx))
	}
	if got := eventKinds(res.Events); got != "jobCreated(created)" {
		t.Fatalf("events = %s", got)
	}
	view := res.Events[0].GetJobCreated().GetJob()
	if !proto.Equal(view.GetJob(), j) || len(view.GetInstances()) != 0 {
		t.Errorf("event job view = %v, want the stored job", view)
	}
	if !proto.Equal(res.Events[0].GetJobCreated().GetEntry(), e) {
		t.Errorf("event entry = %v, want %v", res.Events[0].GetJobCreated().GetEntry(), e)
	}
}

func TestJobsListsInIDOrderAfterAnID(t *testing.T) {
	f := newFixture(t)
	for _, id := range []string{"b", "a", "d", "c", "a.1"} {
		f.createJob(id)
	}
	list := func(after string, limit int) []string {
		var ids []string
		f.read().Jobs(nil, after, func(r *storev1.JobRecord) bool {
			ids = append(ids, r.GetJob().GetJobId())
			return len(ids) < limit
		})
		return ids
	}
	tests := []struct {
		after string
		limit int
		want  string
	}{
		{"", 10, "[a a.1 b c d]"},
		{"", 2, "[a a.1]"},
		{"a", 10, "[a.1 b c d]"},
		{"a.1", 2, "[b c]"},
		{"bb", 10, "[c d]"},
		{"d", 10, "[]"},
	}
	for _, tt := range tests {
		if got := fmt.Sprint(list(tt.after, tt.limit)); got != tt.want {
			t.Errorf("Jobs(after %q, %d) = %s, want %s", tt.after, tt.limit, got, tt.want)
		}
	}
}

func TestUpdateJob(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(f *fixture)
		wantState managerv1.JobState
		wantTerm  managerv1.TerminalKind
	}{
		{"pre", func(*fixture) {}, managerv1.JobState_JOB_STATE_PRE, managerv1.TerminalKind_TERMINAL_KIND_UNSPECIFIED},
		{"active", func(f *fixture) { f.onlineNode("n1"); f.bind("job-1", "primary", "n1") },
			managerv1.JobState_JOB_STATE_ACTIVE, managerv1.TerminalKind_TERMINAL_KIND_UNSPECIFIED},
		{"completed", func(f *fixture) { f.must(cComplete("job-1")) },
			managerv1.JobState_JOB_STATE_POST, managerv1.TerminalKind_TERMINAL_KIND_COMPLETED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.createJob("job-1")
			created := f.read().Job(nil, "job-1")
			tt.setup(f)
			before := f.read().Job(nil, "job-1")
			oldHash := before.GetJob().GetCurrentHash()

			spec := jobSpec("job-1")
			spec.Description = "now with a description"
			spec.CurrentHash = oldHash
			spec.State = managerv1.JobState_JOB_STATE_PRE // ignored
			res := f.must(cUpdate(spec))
			idx := f.index

			rec := f.read().Job(nil, "job-1")
			j := rec.GetJob()
			if j.GetDescription() != "now with a description" {
				t.Errorf("description not updated: %q", j.GetDescription())
			}
			if j.GetCurrentHash() != idx {
				t.Errorf("hash = %d, want the index %d", j.GetCurrentHash(), idx)
			}
			if j.GetState() != tt.wantState || j.GetTerminalState().GetKind() != tt.wantTerm {
				t.Errorf("state %v terminal %v, want kept %v %v", j.GetState(), j.GetTerminalState().GetKind(), tt.wantState, tt.wantTerm)
			}
			if rec.GetCreateIndex() != created.GetCreateIndex() || !proto.Equal(rec.GetCreatedAt(), created.GetCreatedAt()) {
				t.Errorf("create index/time changed: %d %v", rec.GetCreateIndex(), rec.GetCreatedAt())
			}
			if rec.GetModifyIndex() != idx || !proto.Equal(rec.GetUpdatedAt(), stamp(idx)) {
				t.Errorf("modify index/time = %d %v, want %d %v", rec.GetModifyIndex(), rec.GetUpdatedAt(), idx, stamp(idx))
			}
			h := rec.GetHistory()
			if len(h) != len(before.GetHistory())+1 || entryKind(h[0]) != "updated" {
				t.Fatalf("history = %s, want updated + %s", entryKinds(h), entryKinds(before.GetHistory()))
			}
			u := h[0].GetUpdated()
			if u.GetPreviousHash() != oldHash || u.GetHash() != idx || h[0].GetIndex() != idx {
				t.Errorf("updated entry = %v at %d, want %d → %d at %d", u, h[0].GetIndex(), oldHash, idx, idx)
			}
			if got := eventKinds(res.Events); got != "jobUpdated(updated)" {
				t.Errorf("events = %s", got)
			}
			// A second update with the hash just read succeeds; the old one
			// is stale now.
			spec2 := jobSpec("job-1")
			spec2.CurrentHash = oldHash
			f.refused(cUpdate(spec2), apierr.FailedPrecondition)
			spec2.CurrentHash = idx
			f.must(cUpdate(spec2))
		})
	}
}

func TestDeleteJob(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	f.createJob("job-1")
	f.createJob("job-2")
	tokA := f.running("job-1", "a", "n1")
	tokB := f.running("job-1", "b", "n1")
	f.bind("job-1", "c", "n1") // provisioned
	f.must(cStop("job-1", "a", "n1"))
	f.must(cReports("n1", report("job-1", "a", tokA, phaseStopped)))
	f.running("job-2", "a", "n1")

	res := f.must(cDelete("job-1"))
	if got := eventKinds(res.Events); got != "jobDeleted" {
		t.Errorf("events = %s, want jobDeleted only", got)
	}
	if res.Events[0].GetJobDeleted().GetJobId() != "job-1" {
		t.Errorf("deleted event names %q", res.Events[0].GetJobDeleted().GetJobId())
	}
	r := f.read()
	if r.Job(nil, "job-1") != nil {
		t.Fatal("job still there")
	}
	if r.Instance(nil, "job-1", "a") != nil {
		t.Error("the stopped instance outlived its job")
	}
	for _, role := range []string{"b", "c"} {
		in := r.Instance(nil, "job-1", role)
		if in.GetDesired() != desiredStopped || in.GetPhase() != phaseStopping ||
			in.GetStopReason() != reasonUser || in.GetStopAdditionalReason() != "job deleted" {
			t.Errorf("instance %s = %v, want stopping (user requested, job deleted)", role, in)
		}
	}
	if in := r.Instance(nil, "job-2", "a"); in.GetDesired() != desiredRunning {
		t.Errorf("another job's instance was touched: %v", in)
	}
	if got := len(r.NodeView(r.Node(nil, "n1")).GetInstances()); got != 3 {
		t.Errorf("node lists %d live instances, want 3 (job-1/b, job-1/c, job-2/a)", got)
	}

	// The worker confirms: the instance of the deleted job goes, silently.
	res = f.must(cReports("n1", report("job-1", "b", tokB, phaseStopped)))
	if len(res.Events) != 0 || res.Value != 0 {
		t.Errorf("report for a deleted job raised %s, value %v", eventKinds(res.Events), res.Value)
	}
	if f.instance("job-1", "b") != nil {
		t.Error("stopped instance of a deleted job still stored")
	}
	// Its node's reconnect without it finishes the other one.
	f.must(cOnline("n1", report("job-2", "a", f.instance("job-2", "a").GetFencingToken(), phaseRunning)))
	if f.instance("job-1", "c") != nil {
		t.Errorf("instance c (provisioned when deleted, then stopping) = %v after a hello without it", f.instance("job-1", "c"))
	}
	if got := len(f.read().InstancesOfJob(nil, "job-1")); got != 0 {
		t.Errorf("%d instances of the deleted job remain", got)
	}
}

// TestTerminalVerdicts covers CompleteJob and MarkJobFailed: instances are
// asked to stop, the job is POST with its verdict, and the history and the
// events say so in order, every event showing the job as it ended.
func TestTerminalVerdicts(t *testing.T) {
	tests := []struct {
		name       string
		cmd        *storev1.Command
		kind       managerv1.TerminalKind
		reason     managerv1.StoppingReason
		why        string
		lastEntry  string
		rejectedAs string
	}{
		{"complete", cComplete("job-1"), managerv1.TerminalKind_TERMINAL_KIND_COMPLETED, reasonUser, "job completed", "completed", ""},
		{"fail", cFail("job-1", "restart ceiling"), managerv1.TerminalKind_TERMINAL_KIND_FAILED, reasonJobFailed, "restart ceiling", "rejected", "marked failed: restart ceiling"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.onlineNode("n1")
			f.createJob("job-1")
			tokA := f.running("job-1", "a", "n1")
			tokB := f.must(cBindOpts("job-1", "b", "n1", &managerv1.StartJobOptions{DeferStart: true})).Value.(uint64)
			tokC := f.running("job-1", "c", "n1")
			f.must(cStop("job-1", "c", "n1"))
			f.must(cReports("n1", report("job-1", "c", tokC, phaseStopped)))
			before := f.history("job-1")

			res := f.must(tt.cmd)
			idx := f.index
			rec := f.read().Job(nil, "job-1")
			j := rec.GetJob()
			if j.GetState() != managerv1.JobState_JOB_STATE_POST || j.GetTerminalState().GetKind() != tt.kind ||
				!proto.Equal(j.GetTerminalState().GetAt(), stamp(idx)) {
				t.Errorf("job state %v terminal %v, want POST %v at %v", j.GetState(), j.GetTerminalState(), tt.kind, stamp(idx))
			}
			if tt.kind == managerv1.TerminalKind_TERMINAL_KIND_FAILED && j.GetTerminalState().GetReason() != "restart ceiling" {
				t.Errorf("terminal reason = %q", j.GetTerminalState().GetReason())
			}
			h := rec.GetHistory()
			added := h[:len(h)-len(before)]
			if got, want := entryKinds(added), tt.lastEntry+",stopping,stopping"; got != want {
				t.Fatalf("new entries = %s, want %s", got, want)
			}
			// Newest first: b was stopped after a (role order).
			for i, want := range []struct {
				role string
				tok  uint64
			}{{"b", tokB}, {"a", tokA}} {
				e := added[i+1]
				if !sameRef(entryRef(e), want.role, "n1", want.tok) || e.GetStopping().GetReason() != tt.reason ||
					e.GetStopping().GetAdditionalReason() != tt.why || e.GetIndex() != idx {
					t.Errorf("entry %d = %v, want stopping of %s/n1/%d (%v, %q)", i+1, e, want.role, want.tok, tt.reason, tt.why)
				}
			}
			if tt.rejectedAs != "" && added[0].GetRejected().GetReason() != tt.rejectedAs {
				t.Errorf("rejected reason = %q, want %q", added[0].GetRejected().GetReason(), tt.rejectedAs)
			}
			for _, role := range []string{"a", "b"} {
				in := f.instance("job-1", role)
				if in.GetDesired() != desiredStopped || in.GetPhase() != phaseStopping || in.GetStopReason() != tt.reason {
					t.Errorf("instance %s = %v, want stopping (%v)", role, in, tt.reason)
				}
			}
			if in := f.instance("job-1", "c"); in.GetPhase() != phaseStopped {
				t.Errorf("the stopped instance changed: %v", in)
			}
			want := fmt.Sprintf("jobUpdated(stopping),jobUpdated(stopping),jobUpdated(%s)", tt.lastEntry)
			if got := eventKinds(res.Events); got != want {
				t.Fatalf("events = %s, want %s", got, want)
			}
			for i, e := range res.Events {
				view := e.GetJobUpdated().GetJob()
				if view.GetJob().GetState() != managerv1.JobState_JOB_STATE_POST {
					t.Errorf("event %d shows the job %v, want it as the command left it (POST)", i, view.GetJob().GetState())
				}
				if !proto.Equal(e.GetJobUpdated().GetEntry(), added[len(added)-1-i]) {
					t.Errorf("event %d entry = %v, want %v", i, e.GetJobUpdated().GetEntry(), added[len(added)-1-i])
				}
			}
			// Terminal: never started again.
			f.refused(cBind("job-1", "d", "n1"), apierr.FailedPrecondition, `"job-1"`)
			f.refused(cStartPrepared("job-1", "b", "n1"), apierr.FailedPrecondition)
		})
	}
}

func TestMarkJobFailedFirstVerdictStands(t *testing.T) {
	f := newFixture(t)
	f.createJob("job-1")
	f.must(cFail("job-1", "first"))
	before := f.snap()
	f.must(cFail("job-1", "second"))
	f.unchangedSince(before)
	if r := f.read().Job(nil, "job-1").GetJob().GetTerminalState().GetReason(); r != "first" {
		t.Errorf("reason = %q, want the first verdict", r)
	}
}

// TestHistoryTrimming: a job keeps its newest MaxHistory entries, whatever
// number of entries a command adds.
func TestHistoryTrimming(t *testing.T) {
	script := func(f *fixture) {
		f.onlineNode("n1")
		f.createJob("job-1")
		for i := range 6 {
			role := fmt.Sprintf("r%d", i)
			tok := f.bind("job-1", role, "n1")
			f.must(cReports("n1", report("job-1", role, tok, phasePrepared)))
			f.must(cReports("n1", report("job-1", role, tok, phaseRunning)))
			// One command adds stopping and stopped.
			f.must(cReports("n1", report("job-1", role, tok, phaseStopped)))
		}
	}
	full := newFixtureLimits(t, state.Limits{MaxHistory: 1 << 20})
	script(full)
	all := full.history("job-1")
	if len(all) != 1+6*5 {
		t.Fatalf("untrimmed history has %d entries, want %d", len(all), 1+6*5)
	}
	for _, max := range []int{1, 2, 5, 30, 31, 32} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			f := newFixtureLimits(t, state.Limits{MaxHistory: max})
			script(f)
			h := f.history("job-1")
			want := all
			if len(want) > max {
				want = want[:max]
			}
			if len(h) != len(want) {
				t.Fatalf("history has %d entries, want %d", len(h), len(want))
			}
			for i := range h {
				if !proto.Equal(h[i], want[i]) {
					t.Errorf("entry %d = %v, want %v", i, h[i], want[i])
				}
			}
		})
	}
	t.Run("default", func(t *testing.T) {
		f := newFixture(t)
		script(f)
		if got := len(f.history("job-1")); got != len(all) {
			t.Errorf("default limit kept %d entries, want %d", got, len(all))
		}
	})
}
