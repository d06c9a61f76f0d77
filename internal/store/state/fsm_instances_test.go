package state_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func ports(url string) map[string]*managerv1.ResolvedPortMappings {
	return map[string]*managerv1.ResolvedPortMappings{
		"main": {Mappings: []*managerv1.ResolvedPortMapping{{Url: url, Target: 8080, Published: 31000}}},
	}
}

func TestBindInstance(t *testing.T) {
	tests := []struct {
		name            string
		role            string
		opts            *managerv1.StartJobOptions
		wantRuntimeRole string
		wantDesired     managerv1.InstanceDesired
	}{
		{"plain", "primary", nil, "primary", desiredRunning},
		{"runtime role", "primary@3f9c1e2a", &managerv1.StartJobOptions{RuntimeRole: "primary", MigrationId: "mig-1"}, "primary", desiredRunning},
		{"defer start", "backup", &managerv1.StartJobOptions{DeferStart: true, MigrationInitialState: []byte("opaque")}, "backup", desiredPrepared},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.onlineNode("n1")
			hash := f.createJob("job-1")
			res := f.must(cBindOpts("job-1", tt.role, "n1", tt.opts))
			idx := f.index
			if res.Value != idx {
				t.Errorf("value = %v, want the fencing token %d", res.Value, idx)
			}
			in := f.instance("job-1", tt.role)
			want := &managerv1.Instance{
				JobId: "job-1", Role: tt.role, NodeId: "n1", FencingToken: idx,
				Desired: tt.wantDesired, Phase: phaseProvisioned,
				RuntimeRole: tt.wantRuntimeRole, MigrationId: tt.opts.GetMigrationId(),
				MigrationInitialState: tt.opts.GetMigrationInitialState(),
				BoundAt:               stamp(idx), JobHash: hash,
			}
			if !proto.Equal(in, want) {
				t.Errorf("instance = %v\nwant %v", in, want)
			}
			rec := f.read().Job(nil, "job-1")
			if rec.GetJob().GetState() != managerv1.JobState_JOB_STATE_ACTIVE {
				t.Errorf("job state = %v, want ACTIVE", rec.GetJob().GetState())
			}
			if got := entryKinds(rec.GetHistory()); got != "provisioned,created" {
				t.Fatalf("history = %s", got)
			}
			p := rec.GetHistory()[0].GetProvisioned()
			if !sameRef(p.GetInstance(), tt.role, "n1", idx) || p.GetRuntimeRole() != tt.wantRuntimeRole ||
				p.GetDeferStart() != tt.opts.GetDeferStart() || p.GetMigrationId() != tt.opts.GetMigrationId() {
				t.Errorf("provisioned entry = %v", p)
			}
			if got := eventKinds(res.Events); got != "jobUpdated(provisioned)" {
				t.Fatalf("events = %s", got)
			}
			view := res.Events[0].GetJobUpdated().GetJob()
			if len(view.GetInstances()) != 1 || view.GetInstances()[0].GetFencingToken() != idx {
				t.Fatalf("event view instances = %v", view.GetInstances())
			}
			if view.GetInstances()[0].GetMigrationInitialState() != nil {
				t.Error("the job view carries the opaque migration state")
			}
			if view.GetJob().GetState() != managerv1.JobState_JOB_STATE_ACTIVE {
				t.Errorf("event view job state = %v", view.GetJob().GetState())
			}
			r := f.read()
			nv := r.NodeView(r.Node(nil, "n1"))
			if len(nv.GetInstances()) != 1 || !proto.Equal(nv.GetInstances()[0], &managerv1.InstanceSummary{JobId: "job-1", Role: tt.role, FencingToken: idx}) {
				t.Errorf("node view instances = %v", nv.GetInstances())
			}
		})
	}
}

// TestRebindAfterStopOnSameNode: a stopped instance's key can be bound again
// and the new binding gets a higher token.
func TestRebindAfterStopOnSameNode(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	f.createJob("job-1")
	tok1 := f.running("job-1", "primary", "n1")
	f.must(cStop("job-1", "primary", "n1"))
	f.must(cReports("n1", report("job-1", "primary", tok1, phaseStopped)))
	tok2 := f.bind("job-1", "primary", "n1")
	if tok2 <= tok1 {
		t.Fatalf("new token %d not above %d", tok2, tok1)
	}
	// The old binding's reports are stale now.
	res := f.must(cReports("n1", report("job-1", "primary", tok1, phaseRunning)))
	if res.Value != 1 {
		t.Errorf("stale count = %v, want 1", res.Value)
	}
	if in := f.instance("job-1", "primary"); in.GetFencingToken() != tok2 || in.GetPhase() != phaseProvisioned {
		t.Errorf("instance = %v", in)
	}
}

func TestStopInstance(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	f.createJob("job-1")
	tok := f.running("job-1", "primary", "n1")
	res := f.must(storev1Stop{"job-1", "primary", "n1", 5000, "mig-9"}.cmd())
	in := f.instance("job-1", "primary")
	if in.GetDesired() != desiredStopped || in.GetPhase() != phaseStopping || in.GetStopGraceMs() != 5000 ||
		in.GetMigrationId() != "mig-9" || in.GetStopReason() != reasonUser {
		t.Errorf("instance = %v", in)
	}
	if got := eventKinds(res.Events); got != "jobUpdated(stopping)" {
		t.Errorf("events = %s", got)
	}
	h := f.history("job-1")
	if !sameRef(entryRef(h[0]), "primary", "n1", tok) || h[0].GetStopping().GetReason() != reasonUser {
		t.Errorf("stopping entry = %v", h[0])
	}
	// The worker confirms.
	res = f.must(cReports("n1", &managerv1.InstanceReport{JobId: "job-1", Role: "primary", FencingToken: tok,
		Phase: phaseStopped, ExitCodes: map[string]int32{"main": 0}}))
	if got := entryKinds(f.history("job-1")); got != "stopped,stopping,running,provisioned,created" {
		t.Errorf("history = %s", got)
	}
	if got := eventKinds(res.Events); got != "jobUpdated(stopped)" {
		t.Errorf("events = %s", got)
	}
	if ec := f.history("job-1")[0].GetStopped().GetExitCodes(); ec["main"] != 0 || len(ec) != 1 {
		t.Errorf("exit codes = %v", ec)
	}
}

// storev1Stop builds a StopInstance with every field.
type storev1Stop struct {
	job, role, node string
	grace           uint32
	migration       string
}

func (s storev1Stop) cmd() *storev1.Command {
	c := cStop(s.job, s.role, s.node)
	c.GetStopInstance().GraceMs = s.grace
	c.GetStopInstance().MigrationId = s.migration
	return c
}

func TestStartPrepared(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	f.createJob("job-1")
	tok := f.must(cBindOpts("job-1", "primary", "n1", &managerv1.StartJobOptions{DeferStart: true})).Value.(uint64)
	// Started before the worker even reported it prepared: allowed.
	f.must(cReports("n1", report("job-1", "primary", tok, phasePrepared)))
	if in := f.instance("job-1", "primary"); in.GetPhase() != phasePrepared || in.GetDesired() != desiredPrepared {
		t.Fatalf("instance = %v, want prepared", in)
	}
	before := f.history("job-1")
	f.must(cStartPrepared("job-1", "primary", "n1"))
	if in := f.instance("job-1", "primary"); in.GetDesired() != desiredRunning || in.GetPhase() != phasePrepared {
		t.Errorf("instance = %v, want desired running, still prepared until the worker reports", in)
	}
	if got := len(f.history("job-1")); got != len(before) {
		t.Errorf("start prepared added %d history entries; the running entry is the worker's", got-len(before))
	}
	f.must(cReports("n1", report("job-1", "primary", tok, phaseRunning)))
	if got := entryKinds(f.history("job-1")); got != "running,prepared,provisioned,created" {
		t.Errorf("history = %s", got)
	}
}

// TestInstanceReports walks each phase transition a worker can report.
func TestInstanceReports(t *testing.T) {
	type setup func(f *fixture) uint64 // returns the token
	provisioned := func(f *fixture) uint64 { return f.bind("job-1", "r", "n1") }
	prepared := func(f *fixture) uint64 {
		tok := f.must(cBindOpts("job-1", "r", "n1", &managerv1.StartJobOptions{DeferStart: true})).Value.(uint64)
		f.must(cReports("n1", report("job-1", "r", tok, phasePrepared)))
		f.must(cStartPrepared("job-1", "r", "n1"))
		return tok
	}
	running := func(f *fixture) uint64 {
		tok := f.bind("job-1", "r", "n1")
		f.must(cReports("n1", &managerv1.InstanceReport{JobId: "job-1", Role: "r", FencingToken: tok, Phase: phaseRunning, ServicePortMappings: ports("n1:31000")}))
		return tok
	}
	stopping := func(f *fixture) uint64 { tok := running(f); f.must(cStop("job-1", "r", "n1")); return tok }
	stopped := func(f *fixture) uint64 {
		tok := stopping(f)
		f.must(cReports("n1", report("job-1", "r", tok, phaseStopped)))
		return tok
	}
	lostRunning := func(f *fixture) uint64 { tok := running(f); f.must(cLost("n1", "gone")); return tok }

	tests := []struct {
		name        string
		setup       setup
		report      *managerv1.InstanceReport
		wantPhase   managerv1.InstancePhase
		wantDesired managerv1.InstanceDesired
		wantEntries string // new history entries, newest first
	}{
		{"provisioned→prepared", provisioned, &managerv1.InstanceReport{Phase: phasePrepared}, phasePrepared, desiredRunning, "prepared"},
		{"provisioned→running", provisioned, &managerv1.InstanceReport{Phase: phaseRunning, ServicePortMappings: ports("n1:1")}, phaseRunning, desiredRunning, "running"},
		{"prepared→running", prepared, &managerv1.InstanceReport{Phase: phaseRunning}, phaseRunning, desiredRunning, "running"},
		{"running→running same ports", running, &managerv1.InstanceReport{Phase: phaseRunning, ServicePortMappings: ports("n1:31000")}, phaseRunning, desiredRunning, ""},
		{"running→running new ports", running, &managerv1.InstanceReport{Phase: phaseRunning, ServicePortMappings: ports("n1:32000")}, phaseRunning, desiredRunning, "running"},
		{"running→prepared ignored", running, &managerv1.InstanceReport{Phase: phasePrepared}, phaseRunning, desiredRunning, ""},
		{"running→stopping by itself", running, &managerv1.InstanceReport{Phase: phaseStopping, Reason: reasonJobFailed, AdditionalReason: "exit 3"}, phaseStopping, desiredStopped, "stopping"},
		{"running→stopped by itself", running, &managerv1.InstanceReport{Phase: phaseStopped, ExitCodes: map[string]int32{"main": 3}}, phaseStopped, desiredStopped, "stopped,stopping"},
		{"stopping→stopped", stopping, &managerv1.InstanceReport{Phase: phaseStopped}, phaseStopped, desiredStopped, "stopped"},
		{"stopping→running ignored", stopping, &managerv1.InstanceReport{Phase: phaseRunning}, phaseStopping, desiredStopped, ""},
		{"stopping→stopping ignored", stopping, &managerv1.InstanceReport{Phase: phaseStopping}, phaseStopping, desiredStopped, ""},
		{"stopped→running ignored", stopped, &managerv1.InstanceReport{Phase: phaseRunning}, phaseStopped, desiredStopped, ""},
		{"stopped→stopped ignored", stopped, &managerv1.InstanceReport{Phase: phaseStopped}, phaseStopped, desiredStopped, ""},
		{"lost node's instance running again", lostRunning, &managerv1.InstanceReport{Phase: phaseRunning}, phaseRunning, desiredRunning, "running"},
		{"lost node's instance stopped", lostRunning, &managerv1.InstanceReport{Phase: phaseStopped}, phaseStopped, desiredStopped, "stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.onlineNode("n1")
			f.createJob("job-1")
			tok := tt.setup(f)
			before := f.history("job-1")
			inBefore := f.instance("job-1", "r")
			r := proto.Clone(tt.report).(*managerv1.InstanceReport)
			r.JobId, r.Role, r.FencingToken = "job-1", "r", tok
			res := f.must(cReports("n1", r))
			if res.Value != 0 {
				t.Errorf("stale count = %v, want 0", res.Value)
			}
			in := f.instance("job-1", "r")
			if in.GetPhase() != tt.wantPhase || in.GetDesired() != tt.wantDesired {
				t.Errorf("instance %v/%v, want %v/%v", in.GetPhase(), in.GetDesired(), tt.wantPhase, tt.wantDesired)
			}
			if in.GetFencingToken() != tok || in.GetNodeId() != "n1" {
				t.Errorf("a report changed the binding: %v", in)
			}
			h := f.history("job-1")
			added := h[:len(h)-len(before)]
			if got := entryKinds(added); got != tt.wantEntries {
				t.Fatalf("new entries = %q, want %q", got, tt.wantEntries)
			}
			for _, e := range added {
				if !sameRef(entryRef(e), "r", "n1", tok) || e.GetIndex() != f.index {
					t.Errorf("entry %v does not name r/n1/%d at %d", e, tok, f.index)
				}
			}
			if len(res.Events) != len(added) {
				t.Errorf("events = %s for %d entries", eventKinds(res.Events), len(added))
			}
			if tt.wantEntries == "" && !proto.Equal(in, inBefore) {
				t.Errorf("an ignored report changed the instance: %v → %v", inBefore, in)
			}
			switch tt.wantPhase {
			case phaseRunning:
				if tt.report.ServicePortMappings != nil && !proto.Equal(&managerv1.Instance{ServicePortMappings: in.GetServicePortMappings()},
					&managerv1.Instance{ServicePortMappings: tt.report.ServicePortMappings}) {
					t.Errorf("ports = %v, want %v", in.GetServicePortMappings(), tt.report.ServicePortMappings)
				}
			case phaseStopped:
				if in.GetServicePortMappings() != nil {
					t.Errorf("a stopped instance keeps ports %v", in.GetServicePortMappings())
				}
			}
			if e := added; len(e) > 0 && e[0].GetRunning() != nil && e[0].GetRunning().GetAdopted() {
				t.Error("a report outside a hello is marked adopted")
			}
			if tt.report.Phase == phaseStopping && len(added) == 1 {
				s := added[0].GetStopping()
				if s.GetReason() != tt.report.Reason || s.GetAdditionalReason() != tt.report.AdditionalReason {
					t.Errorf("stopping entry = %v, want the worker's reason", s)
				}
			}
		})
	}
}

func TestInstanceReportRestartsAndJobHash(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	f.createJob("job-1")
	tok := f.running("job-1", "r", "n1")
	before := f.history("job-1")
	res := f.must(cReports("n1", &managerv1.InstanceReport{JobId: "job-1", Role: "r", FencingToken: tok, Phase: phaseRunning, Restarts: 2, JobHash: 77}))
	in := f.instance("job-1", "r")
	if in.GetRestarts() != 2 || in.GetJobHash() != 77 {
		t.Errorf("restarts %d job hash %d, want 2 77", in.GetRestarts(), in.GetJobHash())
	}
	if len(f.history("job-1")) != len(before) || len(res.Events) != 0 {
		t.Errorf("a restart count alone added history (%d) or events (%s)", len(f.history("job-1"))-len(before), eventKinds(res.Events))
	}
}

// TestStaleReportsIgnored: a report counts only where the instance is bound
// to the reporting node under the reported token.
func TestStaleReportsIgnored(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	f.onlineNode("n2")
	f.createJob("job-1")
	tok := f.running("job-1", "r", "n1")
	tests := []struct {
		name string
		node string
		r    *managerv1.InstanceReport
	}{
		{"older token", "n1", report("job-1", "r", tok-1, phaseStopped)},
		{"newer token", "n1", report("job-1", "r", tok+1, phaseStopped)},
		{"no token", "n1", report("job-1", "r", 0, phaseStopped)},
		{"other node", "n2", report("job-1", "r", tok, phaseStopped)},
		{"unknown node", "n9", report("job-1", "r", tok, phaseStopped)},
		{"unknown role", "n1", report("job-1", "x", tok, phaseStopped)},
		{"unknown job", "n1", report("job-9", "r", tok, phaseStopped)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snap()
			res := f.must(cReports(tt.node, tt.r))
			if res.Value != 1 || len(res.Events) != 0 {
				t.Errorf("value %v events %s, want 1 stale, none", res.Value, eventKinds(res.Events))
			}
			f.unchangedSince(before)
		})
	}
	t.Run("mixed", func(t *testing.T) {
		res := f.must(cReports("n1",
			report("job-1", "r", tok-1, phaseStopped),
			&managerv1.InstanceReport{JobId: "job-1", Role: "r", FencingToken: tok, Phase: phaseRunning, Restarts: 1},
			report("job-9", "r", tok, phaseStopped)))
		if res.Value != 2 {
			t.Errorf("stale = %v, want 2", res.Value)
		}
		if in := f.instance("job-1", "r"); in.GetRestarts() != 1 || in.GetPhase() != phaseRunning {
			t.Errorf("the current report was not applied: %v", in)
		}
	})
}

// TestRebindAfterNodeLossSupersedes: once a node is lost its instances may
// be bound elsewhere; the new binding's higher token fences the old one, and
// the old node coming back with it changes nothing.
func TestRebindAfterNodeLossSupersedes(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	f.onlineNode("b")
	f.createJob("job-1")
	tok1 := f.running("job-1", "primary", "a")

	res := f.must(cLost("a", "stream gone for 30s"))
	if got := eventKinds(res.Events); got != "jobUpdated(stopping),nodeLost" {
		t.Errorf("lost events = %s", got)
	}
	in := f.instance("job-1", "primary")
	if in.GetPhase() != phaseStopping || in.GetDesired() != desiredRunning {
		t.Errorf("after loss instance = %v, want stopping with desired still running", in)
	}
	e := f.history("job-1")[0]
	if !sameRef(entryRef(e), "primary", "a", tok1) || e.GetStopping().GetReason() != reasonNodeStopped ||
		e.GetStopping().GetAdditionalReason() != "stream gone for 30s" {
		t.Errorf("loss entry = %v", e)
	}
	if n := f.node("a").GetNode(); n.GetState() != nodeLost || n.GetStateReason() != "stream gone for 30s" {
		t.Errorf("node a = %v", n)
	}

	tok2 := f.bind("job-1", "primary", "b")
	if tok2 <= tok1 {
		t.Fatalf("token %d does not supersede %d", tok2, tok1)
	}
	r := f.read()
	if got := len(r.NodeView(r.Node(nil, "a")).GetInstances()); got != 0 {
		t.Errorf("node a still lists %d instances", got)
	}

	// The old node's late reports are stale.
	before := f.snap()
	res = f.must(cReports("a", report("job-1", "primary", tok1, phaseRunning)))
	if res.Value != 1 {
		t.Errorf("stale = %v, want 1", res.Value)
	}
	f.unchangedSince(before)

	// It comes back still running the old binding: nothing is resurrected.
	hist := f.history("job-1")
	res = f.must(cOnline("a", report("job-1", "primary", tok1, phaseRunning)))
	if res.Value != 1 {
		t.Errorf("hello stale = %v, want 1", res.Value)
	}
	if got := eventKinds(res.Events); got != "nodeOnline" {
		t.Errorf("hello events = %s, want nodeOnline only", got)
	}
	in = f.instance("job-1", "primary")
	if in.GetNodeId() != "b" || in.GetFencingToken() != tok2 || in.GetPhase() != phaseProvisioned || in.GetDesired() != desiredRunning {
		t.Errorf("instance = %v, want the binding on b untouched", in)
	}
	if got := len(f.history("job-1")); got != len(hist) {
		t.Errorf("the old node's hello added %d history entries", got-len(hist))
	}
	// And the old binding cannot be started by the old node.
	f.refused(cStartPrepared("job-1", "primary", "a"), apierr.NotFound, `"b"`, `"a"`)
}

// TestNodeReturnsAndIsAdopted: a lost node that comes back with its
// instances under their current tokens keeps them.
func TestNodeReturnsAndIsAdopted(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	f.createJob("job-1")
	tok := f.running("job-1", "primary", "a")
	f.must(cLost("a", "gone"))
	res := f.must(cOnline("a", &managerv1.InstanceReport{JobId: "job-1", Role: "primary", FencingToken: tok, Phase: phaseRunning, ServicePortMappings: ports("a:1")}))
	if got := eventKinds(res.Events); got != "nodeOnline,jobUpdated(running)" {
		t.Errorf("events = %s", got)
	}
	in := f.instance("job-1", "primary")
	if in.GetPhase() != phaseRunning || in.GetDesired() != desiredRunning || in.GetFencingToken() != tok {
		t.Errorf("instance = %v", in)
	}
	e := f.history("job-1")[0]
	if !e.GetRunning().GetAdopted() || !sameRef(entryRef(e), "primary", "a", tok) {
		t.Errorf("entry = %v, want running adopted", e)
	}
}

// TestNodeOnlineInventory: at a hello (a reconnect within the grace), instances the worker holds under
// current tokens are adopted; instances the store has on the node but the
// worker does not hold are recorded stopped, except ones whose start may not
// have reached the worker yet (provisioned); old tokens resurrect nothing.
func TestNodeOnlineInventory(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	for _, j := range []string{"held", "missing", "fresh", "old", "gone"} {
		f.createJob(j)
	}
	tokHeld := f.running("held", "r", "a")
	f.running("missing", "r", "a")
	tokFresh := f.bind("fresh", "r", "a")
	// "old": stopped under tok1, bound again (tok2), not yet started.
	tokOld1 := f.running("old", "r", "a")
	f.must(cStop("old", "r", "a"))
	f.must(cReports("a", report("old", "r", tokOld1, phaseStopped)))
	tokOld2 := f.bind("old", "r", "a")
	// "gone": stopped for good.
	tokGone := f.running("gone", "r", "a")
	f.must(cStop("gone", "r", "a"))
	f.must(cReports("a", report("gone", "r", tokGone, phaseStopped)))

	// The worker reconnects within its grace (the node was never lost).
	res := f.must(cOnline("a",
		report("held", "r", tokHeld, phaseRunning),
		report("old", "r", tokOld1, phaseRunning),  // superseded
		report("gone", "r", tokGone, phaseRunning), // stopped: stays stopped
	))
	if res.Value != 1 {
		t.Errorf("stale = %v, want 1 (old's first binding)", res.Value)
	}
	check := func(job string, phase managerv1.InstancePhase, desired managerv1.InstanceDesired, tok uint64) {
		t.Helper()
		in := f.instance(job, "r")
		if in.GetPhase() != phase || in.GetDesired() != desired || in.GetFencingToken() != tok {
			t.Errorf("%s = %v/%v token %d, want %v/%v token %d", job, in.GetPhase(), in.GetDesired(), in.GetFencingToken(), phase, desired, tok)
		}
	}
	check("held", phaseRunning, desiredRunning, tokHeld)
	check("missing", phaseStopped, desiredStopped, f.instance("missing", "r").GetFencingToken())
	check("fresh", phaseProvisioned, desiredRunning, tokFresh)
	check("old", phaseProvisioned, desiredRunning, tokOld2)
	check("gone", phaseStopped, desiredStopped, tokGone)

	h := f.history("missing")
	if got := entryKinds(h[:2]); got != "stopped,stopping" {
		t.Fatalf("missing's newest entries = %s", got)
	}
	if s := h[1].GetStopping(); s.GetReason() != reasonNodeStopped || s.GetAdditionalReason() != "not found on the worker when it reconnected" {
		t.Errorf("missing's stopping entry = %v", s)
	}
	if got := entryKinds(f.history("old")[:1]); got != "provisioned" {
		t.Errorf("old's newest entry = %s, want its second binding's provisioned", got)
	}

	// A later hello without the provisioned ones: they are gone now.
	f.must(cReports("a", report("fresh", "r", tokFresh, phasePrepared)))
	f.must(cOnline("a", report("held", "r", tokHeld, phaseRunning)))
	check("fresh", phaseStopped, desiredStopped, tokFresh)
}

// TestNodeLostWhileProvisioning: an instance bound to a node that is then
// lost is stopping; if the worker comes back without it, it is recorded
// stopped (its start never reached the worker).
func TestNodeLostWhileProvisioning(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("a")
	f.createJob("job-1")
	tok := f.bind("job-1", "r", "a")
	f.must(cLost("a", "gone"))
	if in := f.instance("job-1", "r"); in.GetPhase() != phaseStopping || in.GetDesired() != desiredRunning {
		t.Fatalf("instance = %v", in)
	}
	f.must(cOnline("a"))
	in := f.instance("job-1", "r")
	if in.GetPhase() != phaseStopped || in.GetDesired() != desiredStopped || in.GetFencingToken() != tok {
		t.Errorf("instance = %v, want stopped", in)
	}
	if got := entryKinds(f.history("job-1")); got != "stopped,stopping,provisioned,created" {
		t.Errorf("history = %s", got)
	}
}
