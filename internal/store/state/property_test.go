package state_test

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

var (
	propJobs  = []string{"j0", "j1", "j2"}
	propRoles = []string{"primary", "backup"}
	propNodes = []string{"n0", "n1", "n2"}
	propPhase = []managerv1.InstancePhase{phaseProvisioned, phasePrepared, phaseRunning, phaseStopping, phaseStopped}
)

// machine drives a state with random commands and checks invariants after
// each one.
type machine struct {
	s     *state.State
	index uint64
	// applied are clones of every command as it was applied.
	applied []*storev1.Command
	results []state.Result
	// tokens are every fencing token issued per instance key.
	tokens map[string][]uint64
	// maxToken is the highest token seen per key.
	maxToken map[string]uint64
	// stoppedAt are (key, token) pairs seen stopped; desiredStoppedAt ones
	// seen with desired stopped.
	stoppedAt        map[string]bool
	desiredStoppedAt map[string]bool
	// seq makes registration tokens and secrets unique.
	seq int
}

func newMachine() *machine {
	return &machine{
		s: state.New(state.Limits{MaxHistory: 12}), tokens: map[string][]uint64{}, maxToken: map[string]uint64{},
		stoppedAt: map[string]bool{}, desiredStoppedAt: map[string]bool{},
	}
}

func key(job, role string) string { return job + "/" + role }

func (m *machine) read() *state.Read { return m.s.Snapshot() }

// apply applies cmd and checks what every command must do: a refusal
// changes nothing but the index; events carry the index and time.
func (m *machine) apply(t *rapid.T, cmd *storev1.Command) state.Result {
	m.index++
	cmd.Time = stamp(m.index)
	m.applied = append(m.applied, proto.Clone(cmd).(*storev1.Command))
	prev := m.s.Snapshot()
	before := readBytes(t, prev)
	res := m.s.Apply(m.index, cmd)
	m.results = append(m.results, res)
	// Copy on write: no command modifies a row an earlier snapshot holds
	// (views, events and readers share the rows; see shallowCopy).
	if d := diffRecords(t, before, readBytes(t, prev)); d != "" {
		t.Fatalf("%s modified rows an earlier snapshot reads: %s", cmdName(cmd), d)
	}
	if res.Err != nil {
		if apierr.CodeOf(res.Err) == apierr.Internal {
			t.Fatalf("%s refused as INTERNAL: %v", cmdName(cmd), res.Err)
		}
		if len(res.Events) != 0 {
			t.Fatalf("refused %s raised events", cmdName(cmd))
		}
		if d := diffRecords(t, before, snapBytes(t, m.s)); d != "" {
			t.Fatalf("refused %s (%v) changed the state: %s", cmdName(cmd), res.Err, d)
		}
	}
	if got := m.read().Index(); got != m.index {
		t.Fatalf("index = %d, want %d", got, m.index)
	}
	for _, e := range res.Events {
		if e.GetIndex() != m.index || !proto.Equal(e.GetTimestamp(), cmd.GetTime()) {
			t.Fatalf("%s: event %v not stamped with index %d", cmdName(cmd), e, m.index)
		}
	}
	if b, ok := res.Value.(uint64); ok && res.Err == nil {
		c := cmd.GetBindInstance()
		k := key(c.GetJobId(), c.GetRole())
		m.tokens[k] = append(m.tokens[k], b)
	}
	return res
}

func (m *machine) pickToken(t *rapid.T, job, role string) uint64 {
	k := key(job, role)
	in := m.read().Instance(nil, job, role)
	switch rapid.IntRange(0, 5).Draw(t, "tokenKind") {
	case 0, 1, 2:
		if in != nil {
			return in.GetFencingToken()
		}
	case 3:
		if ts := m.tokens[k]; len(ts) > 0 {
			return rapid.SampledFrom(ts).Draw(t, "oldToken")
		}
	}
	return rapid.Uint64Range(0, m.index+1).Draw(t, "anyToken")
}

// pickJob is mostly an existing job.
func (m *machine) pickJob(t *rapid.T) string {
	var ids []string
	m.read().Jobs(nil, "", func(r *storev1.JobRecord) bool { ids = append(ids, r.GetJob().GetJobId()); return true })
	if len(ids) > 0 && rapid.IntRange(0, 4).Draw(t, "existingJob") > 0 {
		return rapid.SampledFrom(ids).Draw(t, "job")
	}
	return rapid.SampledFrom(propJobs).Draw(t, "job")
}

// pickNode is mostly an online node.
func (m *machine) pickNode(t *rapid.T) string {
	var ids []string
	for _, n := range m.read().Nodes(nil) {
		if n.GetNode().GetState() == nodeOnline {
			ids = append(ids, n.GetNode().GetNodeId())
		}
	}
	if len(ids) > 0 && rapid.IntRange(0, 4).Draw(t, "onlineNode") > 0 {
		return rapid.SampledFrom(ids).Draw(t, "node")
	}
	return rapid.SampledFrom(propNodes).Draw(t, "node")
}

// pickInstance is mostly an existing instance: its job, role and node.
func (m *machine) pickInstance(t *rapid.T) (job, role, node string) {
	var ins []*managerv1.Instance
	m.read().Instances(nil, func(in *managerv1.Instance) bool { ins = append(ins, in); return true })
	if len(ins) > 0 && rapid.IntRange(0, 4).Draw(t, "existingInstance") > 0 {
		in := rapid.SampledFrom(ins).Draw(t, "instance")
		node = in.GetNodeId()
		if rapid.IntRange(0, 5).Draw(t, "otherNode") == 0 {
			node = rapid.SampledFrom(propNodes).Draw(t, "node")
		}
		return in.GetJobId(), in.GetRole(), node
	}
	return rapid.SampledFrom(propJobs).Draw(t, "job"), rapid.SampledFrom(propRoles).Draw(t, "role"), rapid.SampledFrom(propNodes).Draw(t, "node")
}

func (m *machine) randomReport(t *rapid.T, job, role, node string) *managerv1.InstanceReport {
	r := report(job, role, m.pickToken(t, job, role), rapid.SampledFrom(propPhase).Draw(t, "phase"))
	if rapid.Bool().Draw(t, "ports") {
		r.ServicePortMappings = ports(fmt.Sprintf("%s:%d", node, rapid.IntRange(1, 3).Draw(t, "port")))
	}
	r.Reason = managerv1.StoppingReason(rapid.IntRange(0, 4).Draw(t, "reason"))
	r.Restarts = uint32(rapid.IntRange(0, 2).Draw(t, "restarts"))
	return r
}

func (m *machine) step(t *rapid.T) {
	job := m.pickJob(t)
	role := rapid.SampledFrom(propRoles).Draw(t, "role")
	node := rapid.SampledFrom(propNodes).Draw(t, "node")
	m.seq++
	action := rapid.SampledFrom([]string{
		"create", "update", "delete", "bind", "bind", "bind", "stop", "startPrepared",
		"report", "report", "report", "report", "report", "report", "complete", "fail",
		"register", "member", "online", "online", "lost", "terminate", "terminated", "deregister",
		"tags", "pool",
	}).Draw(t, "action")
	var cmd *storev1.Command
	switch action {
	case "create":
		cmd = cCreate(jobSpec(rapid.SampledFrom(propJobs).Draw(t, "newJob")))
	case "update":
		spec := jobSpec(job)
		spec.Description = fmt.Sprint("rev ", m.seq)
		spec.CurrentHash = m.read().Job(nil, job).GetJob().GetCurrentHash()
		if rapid.IntRange(0, 3).Draw(t, "staleHash") == 0 {
			spec.CurrentHash--
		}
		cmd = cUpdate(spec)
	case "delete":
		cmd = cDelete(job)
	case "bind":
		if rapid.Bool().Draw(t, "rebind") {
			job, role, _ = m.pickInstance(t)
		}
		cmd = cBindOpts(job, role, m.pickNode(t), &managerv1.StartJobOptions{DeferStart: rapid.Bool().Draw(t, "deferStart")})
	case "stop":
		job, role, node := m.pickInstance(t)
		cmd = cStop(job, role, node)
	case "startPrepared":
		job, role, node := m.pickInstance(t)
		cmd = cStartPrepared(job, role, node)
	case "report":
		var rs []*managerv1.InstanceReport
		for range rapid.IntRange(1, 3).Draw(t, "reports") {
			job, role, n := m.pickInstance(t)
			node = n
			rs = append(rs, m.randomReport(t, job, role, n))
		}
		cmd = cReports(node, rs...)
	case "complete":
		cmd = cComplete(job)
	case "fail":
		cmd = cFail(job, "gave up")
	case "register":
		cmd = cRegister(node, "name-"+node, "", fmt.Sprintf("tok-%s-%d", node, m.seq))
	case "member":
		rec := m.read().Node(nil, node)
		if rec.GetToken() != "" && !rec.GetTokenUsed() || rapid.IntRange(0, 5).Draw(t, "badMember") == 0 {
			cmd = cMember(rec.GetToken(), fmt.Sprintf("sec-%s-%d", node, m.seq), node+":7000")
		} else {
			cmd = cMember("", rec.GetNodeSecret(), node+":7000")
		}
	case "online":
		var inv []*managerv1.InstanceReport
		for range rapid.IntRange(0, 3).Draw(t, "inventory") {
			job, role, _ := m.pickInstance(t)
			inv = append(inv, m.randomReport(t, job, role, node))
		}
		cmd = cOnline(node, inv...)
	case "lost":
		cmd = cLost(m.pickNode(t), "stream gone")
	case "terminate":
		cmd = cTerminate(node)
	case "terminated":
		cmd = cTerminated(node, "gone")
	case "deregister":
		cmd = cDereg(node)
	case "tags":
		cmd = cTags(node, map[string]string{"spare": fmt.Sprint(rapid.Bool().Draw(t, "spare")), "zone": "a"})
	case "pool":
		cmd = cPool(node, rapid.SampledFrom([]string{"", "gold", "silver"}).Draw(t, "pool"))
	}
	m.apply(t, cmd)
}

// bootstrap brings some nodes online and creates some jobs, so that the
// random steps start from a state where instances can be bound.
func (m *machine) bootstrap(t *rapid.T) {
	for _, n := range propNodes {
		if !rapid.Bool().Draw(t, "bootNode") {
			continue
		}
		m.seq++
		m.apply(t, cRegister(n, "name-"+n, "", fmt.Sprintf("tok-%s-%d", n, m.seq)))
		m.apply(t, cMember(fmt.Sprintf("tok-%s-%d", n, m.seq), fmt.Sprintf("sec-%s-%d", n, m.seq), n+":7000"))
		m.apply(t, cOnline(n))
	}
	for _, j := range propJobs {
		if rapid.Bool().Draw(t, "bootJob") {
			m.apply(t, cCreate(jobSpec(j)))
		}
	}
}

// check verifies the invariants of the instance state machine.
func (m *machine) check(t *rapid.T) {
	r := m.read()
	seen := map[string]bool{}
	r.Instances(nil, func(in *managerv1.Instance) bool {
		k := key(in.GetJobId(), in.GetRole())
		kt := fmt.Sprintf("%s@%d", k, in.GetFencingToken())
		// At most one instance per (job, role).
		if seen[k] {
			t.Fatalf("two instances of %s", k)
		}
		seen[k] = true
		// Fencing tokens never decrease for a key.
		if in.GetFencingToken() < m.maxToken[k] {
			t.Fatalf("%s token went back from %d to %d", k, m.maxToken[k], in.GetFencingToken())
		}
		m.maxToken[k] = in.GetFencingToken()
		// A stopped instance never runs again under the same token, and
		// a stop once asked is never taken back.
		if in.GetPhase() == phaseRunning && m.stoppedAt[kt] {
			t.Fatalf("%s is running again after it stopped", kt)
		}
		if in.GetDesired() != desiredStopped && m.desiredStoppedAt[kt] {
			t.Fatalf("%s is desired %v after it was asked to stop", kt, in.GetDesired())
		}
		if in.GetPhase() == phaseStopped {
			m.stoppedAt[kt] = true
			if in.GetDesired() != desiredStopped {
				t.Fatalf("%s is stopped but desired %v", kt, in.GetDesired())
			}
		}
		if in.GetDesired() == desiredStopped {
			m.desiredStoppedAt[kt] = true
		}
		if in.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_UNSPECIFIED {
			t.Fatalf("%s has no phase", kt)
		}
		// A terminal job has nothing running or about to run.
		if j := r.Job(nil, in.GetJobId()); j.GetJob().GetTerminalState() != nil && in.GetDesired() != desiredStopped {
			t.Fatalf("%s of a %v job is desired %v", kt, j.GetJob().GetTerminalState().GetKind(), in.GetDesired())
		}
		// An instance of a deleted job is on its way out.
		if r.Job(nil, in.GetJobId()) == nil && (in.GetDesired() != desiredStopped || in.GetPhase() == phaseStopped) {
			t.Fatalf("%s of a deleted job is %v/%v", kt, in.GetPhase(), in.GetDesired())
		}
		return true
	})
	r.Jobs(nil, "", func(rec *storev1.JobRecord) bool {
		h := rec.GetHistory()
		if len(h) == 0 || len(h) > 12 {
			t.Fatalf("job %s has %d history entries (limit 12)", rec.GetJob().GetJobId(), len(h))
		}
		for i := 0; i+1 < len(h); i++ {
			if h[i].GetIndex() < h[i+1].GetIndex() || h[i].GetTimestamp().AsTime().Before(h[i+1].GetTimestamp().AsTime()) {
				t.Fatalf("job %s history goes back in time at %d: %v then %v", rec.GetJob().GetJobId(), i, h[i+1], h[i])
			}
		}
		if ts := rec.GetJob().GetTerminalState(); ts != nil && rec.GetJob().GetState() != managerv1.JobState_JOB_STATE_POST {
			t.Fatalf("job %s is terminal but %v", rec.GetJob().GetJobId(), rec.GetJob().GetState())
		}
		return true
	})
	for _, n := range r.Nodes(nil) {
		for _, s := range r.NodeView(n).GetInstances() {
			in := r.Instance(nil, s.GetJobId(), s.GetRole())
			if in.GetNodeId() != n.GetNode().GetNodeId() || in.GetPhase() == phaseStopped {
				t.Fatalf("node %s lists %v", n.GetNode().GetNodeId(), s)
			}
		}
	}
}

// TestInstanceStateMachineProperties applies random command sequences and
// checks the invariants after every command, then that the same sequence
// gives the same state again (determinism) and that the state survives a
// snapshot round trip.
func TestInstanceStateMachineProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newMachine()
		m.bootstrap(t)
		m.check(t)
		for range rapid.IntRange(1, 120).Draw(t, "steps") {
			m.step(t)
			m.check(t)
		}
		final := snapBytes(t, m.s)

		// Determinism: the same commands on a fresh state.
		again := state.New(state.Limits{MaxHistory: 12})
		for i, c := range m.applied {
			res := again.Apply(uint64(i+1), proto.Clone(c).(*storev1.Command))
			want := m.results[i]
			if (res.Err == nil) != (want.Err == nil) || (res.Err != nil && res.Err.Error() != want.Err.Error()) {
				t.Fatalf("command %d (%s): %v, first time %v", i+1, cmdName(c), res.Err, want.Err)
			}
			if len(res.Events) != len(want.Events) {
				t.Fatalf("command %d: %s, first time %s", i+1, eventKinds(res.Events), eventKinds(want.Events))
			}
			for k := range res.Events {
				if !proto.Equal(res.Events[k], want.Events[k]) {
					t.Fatalf("command %d event %d differs:\n%v\n%v", i+1, k, res.Events[k], want.Events[k])
				}
			}
		}
		if b := snapBytes(t, again); !bytes.Equal(b, final) {
			t.Fatalf("the same commands gave another state: %s", diffRecords(t, final, b))
		}

		// Snapshot round trip.
		restored := state.New(state.Limits{MaxHistory: 12})
		if _, err := restored.Restore(bytes.NewReader(final)); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if b := snapBytes(t, restored); !bytes.Equal(b, final) {
			t.Fatalf("round trip differs: %s", diffRecords(t, final, b))
		}
	})
}
