package state_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// t0 is the time of index 0; command i is stamped t0 + i seconds.
var t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

func stamp(index uint64) *timestamppb.Timestamp {
	return timestamppb.New(t0.Add(time.Duration(index) * time.Second))
}

// fixture applies commands to a fresh state at consecutive indexes.
type fixture struct {
	tb    testing.TB
	s     *state.State
	index uint64
}

func newFixture(tb testing.TB) *fixture { return newFixtureLimits(tb, state.Limits{}) }

func newFixtureLimits(tb testing.TB, l state.Limits) *fixture {
	return &fixture{tb: tb, s: state.New(l)}
}

// apply applies cmd at the next index, stamping its time when it has none.
func (f *fixture) apply(cmd *storev1.Command) state.Result {
	f.tb.Helper()
	f.index++
	if cmd.GetTime() == nil {
		cmd.Time = stamp(f.index)
	}
	res := f.s.Apply(f.index, cmd)
	if res.Index != f.index {
		f.tb.Fatalf("result index = %d, want %d", res.Index, f.index)
	}
	return res
}

// must applies cmd and fails the test if it is refused.
func (f *fixture) must(cmd *storev1.Command) state.Result {
	f.tb.Helper()
	res := f.apply(cmd)
	if res.Err != nil {
		f.tb.Fatalf("apply %s at %d: %v", cmdName(cmd), f.index, res.Err)
	}
	for i, e := range res.Events {
		if e.GetIndex() != f.index {
			f.tb.Fatalf("%s: event %d index = %d, want %d", cmdName(cmd), i, e.GetIndex(), f.index)
		}
		if !proto.Equal(e.GetTimestamp(), cmd.GetTime()) {
			f.tb.Fatalf("%s: event %d timestamp = %v, want the command's %v", cmdName(cmd), i, e.GetTimestamp(), cmd.GetTime())
		}
	}
	return res
}

// read is a fresh snapshot.
func (f *fixture) read() *state.Read { return f.s.Snapshot() }

// snap is the state's snapshot bytes.
func (f *fixture) snap() []byte { f.tb.Helper(); return snapBytes(f.tb, f.s) }

// refused applies cmd, expects it refused with code and a message that
// contains every string of names, and checks that nothing changed but the
// applied index.
func (f *fixture) refused(cmd *storev1.Command, code apierr.Code, names ...string) error {
	f.tb.Helper()
	before := f.snap()
	res := f.apply(cmd)
	if res.Err == nil {
		f.tb.Fatalf("%s was accepted; want %s", cmdName(cmd), code)
	}
	if got := apierr.CodeOf(res.Err); got != code {
		f.tb.Fatalf("%s: code %s (%v), want %s", cmdName(cmd), got, res.Err, code)
	}
	for _, n := range names {
		if !strings.Contains(res.Err.Error(), n) {
			f.tb.Errorf("%s: error %q does not name %q", cmdName(cmd), res.Err, n)
		}
	}
	if len(res.Events) != 0 {
		f.tb.Errorf("%s: a refused command raised %d events", cmdName(cmd), len(res.Events))
	}
	if res.Value != nil && !reflect.ValueOf(res.Value).IsZero() {
		f.tb.Errorf("%s: a refused command answered %v", cmdName(cmd), res.Value)
	}
	f.unchangedSince(before)
	return res.Err
}

// unchangedSince checks that the state equals the snapshot before except for
// the applied index, which must be the fixture's.
func (f *fixture) unchangedSince(before []byte) {
	f.tb.Helper()
	after := f.snap()
	if got := f.read().Index(); got != f.index {
		f.tb.Errorf("applied index = %d, want %d", got, f.index)
	}
	if d := diffRecords(f.tb, before, after); d != "" {
		f.tb.Errorf("the state changed: %s", d)
	}
}

// tb is what the helpers need of a testing.TB or a *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
}

func snapBytes(tb tb, s *state.State) []byte {
	tb.Helper()
	return readBytes(tb, s.Snapshot())
}

// readBytes is the snapshot bytes of the view r.
func readBytes(tb tb, r *state.Read) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if _, err := r.WriteTo(&buf); err != nil {
		tb.Fatalf("write snapshot: %v", err)
	}
	return buf.Bytes()
}

// splitRecords splits a snapshot into its length-prefixed records.
func splitRecords(b []byte) ([][]byte, error) {
	var out [][]byte
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return nil, errors.New("bad record length")
		}
		out = append(out, b[k:k+int(n)])
		b = b[k+int(n):]
	}
	return out, nil
}

// diffRecords compares two snapshots record by record, ignoring the header
// (which holds the applied index) and the trailer (its checksum covers the
// header); "" when equal.
func diffRecords(tb tb, a, b []byte) string {
	tb.Helper()
	ra, err := splitRecords(a)
	if err != nil {
		tb.Fatalf("split snapshot: %v", err)
	}
	rb, err := splitRecords(b)
	if err != nil {
		tb.Fatalf("split snapshot: %v", err)
	}
	if len(ra) != len(rb) {
		return fmt.Sprintf("%d records, was %d", len(rb)-1, len(ra)-1)
	}
	for i := 1; i < len(ra)-1; i++ {
		if !bytes.Equal(ra[i], rb[i]) {
			x, y := &storev1.SnapshotRecord{}, &storev1.SnapshotRecord{}
			_ = proto.Unmarshal(ra[i], x)
			_ = proto.Unmarshal(rb[i], y)
			return fmt.Sprintf("record %d was %v, is %v", i, x, y)
		}
	}
	return ""
}

// --- commands ---

func cmdName(c *storev1.Command) string {
	if c.GetCmd() == nil {
		return "empty command"
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", c.GetCmd()), "*storev1.Command_")
}

func jobSpec(id string) *managerv1.Job {
	return &managerv1.Job{
		JobId:    id,
		Tags:     map[string]string{"team": "live"},
		Services: []*managerv1.Service{{Name: "main", Image: "hello:dev"}},
	}
}

func cCreate(job *managerv1.Job) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: job}}}
}

func cUpdate(job *managerv1.Job) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_UpdateJob{UpdateJob: &storev1.UpdateJob{Job: job}}}
}

func cDelete(id string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_DeleteJob{DeleteJob: &storev1.DeleteJob{JobId: id}}}
}

func cBind(job, role, node string) *storev1.Command {
	return cBindOpts(job, role, node, nil)
}

func cBindOpts(job, role, node string, o *managerv1.StartJobOptions) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_BindInstance{BindInstance: &storev1.BindInstance{
		JobId: job, Role: role, NodeId: node, Options: o,
	}}}
}

func cStop(job, role, node string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_StopInstance{StopInstance: &storev1.StopInstance{
		JobId: job, Role: role, NodeId: node,
	}}}
}

func cStartPrepared(job, role, node string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_StartPrepared{StartPrepared: &storev1.StartPreparedInstance{
		JobId: job, Role: role, NodeId: node,
	}}}
}

func cComplete(id string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_CompleteJob{CompleteJob: &storev1.CompleteJob{JobId: id}}}
}

func cFail(id, reason string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_MarkJobFailed{MarkJobFailed: &storev1.MarkJobFailed{JobId: id, Reason: reason}}}
}

func cReports(node string, reports ...*managerv1.InstanceReport) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_InstanceReports{InstanceReports: &storev1.InstanceReports{
		NodeId: node, Reports: reports,
	}}}
}

func report(job, role string, token uint64, phase managerv1.InstancePhase) *managerv1.InstanceReport {
	return &managerv1.InstanceReport{JobId: job, Role: role, FencingToken: token, Phase: phase}
}

func cRegister(id, name, pool, token string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{
		NodeId: id, NodeName: name, Pool: pool, Token: token,
	}}}
}

func cMember(token, secret, addr string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_MemberRegister{MemberRegister: &storev1.MemberRegister{
		Token: token, NodeSecret: secret, Address: addr,
		Hardware: &managerv1.Hardware{Vcpus: 8, MemoryBytes: 16 << 30, Architecture: managerv1.Architecture_ARCHITECTURE_X86_64},
		Runtime:  "process", WorkerVersion: "1.0.0",
	}}}
}

func cDereg(id string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_DeregisterSlot{DeregisterSlot: &storev1.DeregisterSlot{NodeId: id}}}
}

func cPool(id, pool string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_SetSlotPool{SetSlotPool: &storev1.SetSlotPool{NodeId: id, Pool: pool}}}
}

func cOnline(id string, inventory ...*managerv1.InstanceReport) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_NodeOnline{NodeOnline: &storev1.NodeOnline{
		NodeId: id, Hello: &managerv1.WorkerHello{NodeId: id, Runtime: "process", WorkerVersion: "1.0.1", Inventory: inventory},
	}}}
}

func cLost(id, reason string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_NodeLost{NodeLost: &storev1.NodeLost{NodeId: id, Reason: reason}}}
}

func cTerminate(id string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{NodeId: id}}}
}

func cTerminated(id, reason string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_NodeTerminated{NodeTerminated: &storev1.NodeTerminated{NodeId: id, Reason: reason}}}
}

func cTags(id string, tags map[string]string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_SetNodeTags{SetNodeTags: &storev1.SetNodeTags{NodeId: id, Tags: tags}}}
}

func cIdle(id string, ms int64) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_SetNodeIdleExpiry{SetNodeIdleExpiry: &storev1.SetNodeIdleExpiry{NodeId: id, IdleExpiryMs: ms}}}
}

// --- setups ---

// createJob creates a job and returns its hash.
func (f *fixture) createJob(id string) uint64 {
	f.tb.Helper()
	f.must(cCreate(jobSpec(id)))
	return f.read().Job(nil, id).GetJob().GetCurrentHash()
}

// registerNode registers a slot (token "tok-<id>") without its worker.
func (f *fixture) registerNode(id string) {
	f.tb.Helper()
	f.must(cRegister(id, "name-"+id, "", "tok-"+id))
}

// onlineNode registers a slot, its worker (secret "sec-<id>") and its hello.
func (f *fixture) onlineNode(id string) {
	f.tb.Helper()
	f.registerNode(id)
	f.must(cMember("tok-"+id, "sec-"+id, id+".local:7000"))
	f.must(cOnline(id))
}

// bind starts (job, role) on node and returns its fencing token.
func (f *fixture) bind(job, role, node string) uint64 {
	f.tb.Helper()
	res := f.must(cBind(job, role, node))
	return res.Value.(uint64)
}

// running binds and reports the instance running.
func (f *fixture) running(job, role, node string) uint64 {
	f.tb.Helper()
	tok := f.bind(job, role, node)
	f.must(cReports(node, report(job, role, tok, managerv1.InstancePhase_INSTANCE_PHASE_RUNNING)))
	return tok
}

func (f *fixture) instance(job, role string) *managerv1.Instance {
	f.tb.Helper()
	return f.read().Instance(nil, job, role)
}

func (f *fixture) history(job string) []*managerv1.JobHistoryEntry {
	f.tb.Helper()
	rec := f.read().Job(nil, job)
	if rec == nil {
		f.tb.Fatalf("no job %q", job)
	}
	return rec.GetHistory()
}

func (f *fixture) node(id string) *storev1.NodeRecord {
	f.tb.Helper()
	return f.read().Node(nil, id)
}

// --- describing history and events ---

func entryKind(e *managerv1.JobHistoryEntry) string {
	switch e.GetEvent().(type) {
	case *managerv1.JobHistoryEntry_Created:
		return "created"
	case *managerv1.JobHistoryEntry_Updated:
		return "updated"
	case *managerv1.JobHistoryEntry_Provisioned:
		return "provisioned"
	case *managerv1.JobHistoryEntry_Prepared:
		return "prepared"
	case *managerv1.JobHistoryEntry_Running:
		return "running"
	case *managerv1.JobHistoryEntry_Stopping:
		return "stopping"
	case *managerv1.JobHistoryEntry_Stopped:
		return "stopped"
	case *managerv1.JobHistoryEntry_Completed:
		return "completed"
	case *managerv1.JobHistoryEntry_Rejected:
		return "rejected"
	case *managerv1.JobHistoryEntry_Notice:
		return "notice"
	}
	return "?"
}

func entryKinds(h []*managerv1.JobHistoryEntry) string {
	k := make([]string, len(h))
	for i, e := range h {
		k[i] = entryKind(e)
	}
	return strings.Join(k, ",")
}

// entryRef is the instance an instance entry names, or nil.
func entryRef(e *managerv1.JobHistoryEntry) *managerv1.InstanceRef {
	switch x := e.GetEvent().(type) {
	case *managerv1.JobHistoryEntry_Provisioned:
		return x.Provisioned.GetInstance()
	case *managerv1.JobHistoryEntry_Prepared:
		return x.Prepared.GetInstance()
	case *managerv1.JobHistoryEntry_Running:
		return x.Running.GetInstance()
	case *managerv1.JobHistoryEntry_Stopping:
		return x.Stopping.GetInstance()
	case *managerv1.JobHistoryEntry_Stopped:
		return x.Stopped.GetInstance()
	}
	return nil
}

func eventKind(e *managerv1.Event) string {
	switch e.GetKind().(type) {
	case *managerv1.Event_JobCreated:
		return "jobCreated"
	case *managerv1.Event_JobUpdated:
		return "jobUpdated"
	case *managerv1.Event_JobDeleted:
		return "jobDeleted"
	case *managerv1.Event_NodeOnline:
		return "nodeOnline"
	case *managerv1.Event_NodeLost:
		return "nodeLost"
	case *managerv1.Event_NodeStopping:
		return "nodeStopping"
	case *managerv1.Event_NodeTerminated:
		return "nodeTerminated"
	case *managerv1.Event_NodeTagsUpdated:
		return "nodeTagsUpdated"
	case *managerv1.Event_ClusterSlotRegistered:
		return "slotRegistered"
	case *managerv1.Event_ClusterSlotUpdated:
		return "slotUpdated"
	case *managerv1.Event_ClusterSlotDeregistered:
		return "slotDeregistered"
	case *managerv1.Event_MigrationUpdated:
		return "migrationUpdated"
	case *managerv1.Event_NodeDrainUpdated:
		return "nodeDrainUpdated"
	case *managerv1.Event_MigrationState:
		return "migrationState"
	case *managerv1.Event_MigrationTargetReady:
		return "migrationTargetReady"
	case *managerv1.Event_MigrationTargetApplied:
		return "migrationTargetApplied"
	case *managerv1.Event_MigrationForgotten:
		return "migrationForgotten"
	}
	return "?"
}

func eventKinds(evs []*managerv1.Event) string {
	k := make([]string, len(evs))
	for i, e := range evs {
		k[i] = eventKind(e)
		if je := jobEventOf(e); je != nil && je.GetEntry() != nil {
			k[i] += "(" + entryKind(je.GetEntry()) + ")"
		}
	}
	return strings.Join(k, ",")
}

func jobEventOf(e *managerv1.Event) *managerv1.JobEvent {
	if je := e.GetJobCreated(); je != nil {
		return je
	}
	return e.GetJobUpdated()
}

func sameRef(r *managerv1.InstanceRef, role, node string, token uint64) bool {
	return r.GetRole() == role && r.GetNodeId() == node && r.GetFencingToken() == token
}

const (
	phaseProvisioned = managerv1.InstancePhase_INSTANCE_PHASE_PROVISIONED
	phasePrepared    = managerv1.InstancePhase_INSTANCE_PHASE_PREPARED
	phaseRunning     = managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	phaseStopping    = managerv1.InstancePhase_INSTANCE_PHASE_STOPPING
	phaseStopped     = managerv1.InstancePhase_INSTANCE_PHASE_STOPPED

	desiredRunning  = managerv1.InstanceDesired_INSTANCE_DESIRED_RUNNING
	desiredPrepared = managerv1.InstanceDesired_INSTANCE_DESIRED_PREPARED
	desiredStopped  = managerv1.InstanceDesired_INSTANCE_DESIRED_STOPPED

	nodeRegistered = managerv1.NodeState_NODE_STATE_REGISTERED
	nodeOnline     = managerv1.NodeState_NODE_STATE_ONLINE
	nodeLost       = managerv1.NodeState_NODE_STATE_LOST
	nodeStopping   = managerv1.NodeState_NODE_STATE_STOPPING
	nodeTerminated = managerv1.NodeState_NODE_STATE_TERMINATED

	reasonNodeStopped    = managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED
	reasonNodeTerminated = managerv1.StoppingReason_STOPPING_REASON_NODE_TERMINATED
	reasonUser           = managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED
	reasonJobFailed      = managerv1.StoppingReason_STOPPING_REASON_JOB_FAILED
)
