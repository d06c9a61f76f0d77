package automanager

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// fakeAPI is the Manager as the saga sees it, in memory: jobs with their
// instances, nodes, migration records (with the store's revision checks),
// and a log of every call. Failures are injected per method.
type fakeAPI struct {
	mu    sync.Mutex
	rev   uint64
	jobs  map[string]*managerv1.JobWithHistory
	nodes []*managerv1.Node
	migs  map[string]*managerv1.MigrationState
	// bundles are what ListBundles answers.
	bundles []*managerv1.Bundle
	calls   []string
	fail    map[string]error
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{jobs: map[string]*managerv1.JobWithHistory{}, migs: map[string]*managerv1.MigrationState{}, fail: map[string]error{}}
}

func (f *fakeAPI) call(name string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprint(append([]any{name}, args...)...))
	return f.fail[name]
}

func (f *fakeAPI) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeAPI) setFail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = err
}

func (f *fakeAPI) ListNodes(ctx context.Context) ([]*norsk.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*norsk.Node, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = proto.Clone(n).(*managerv1.Node)
	}
	return out, nil
}

func (f *fakeAPI) JobSearch(ctx context.Context, s norsk.JobSearchSettings) ([]*norsk.JobWithHistory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*norsk.JobWithHistory
	for _, id := range sortedKeys(f.jobs) {
		out = append(out, proto.Clone(f.jobs[id]).(*managerv1.JobWithHistory))
	}
	return out, nil
}

func (f *fakeAPI) JobById(ctx context.Context, jobID string) (*norsk.JobWithHistory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	jh, ok := f.jobs[jobID]
	if !ok {
		return nil, &norsk.Error{Op: "JobById", Message: "no job", Code: 5}
	}
	return proto.Clone(jh).(*managerv1.JobWithHistory), nil
}

func (f *fakeAPI) UpdateJob(ctx context.Context, job *norsk.Job) (uint64, error) { return 0, nil }

// instance sets (or adds) the job's instance.
func (f *fakeAPI) instance(jobID, role, nodeID string, phase managerv1.InstancePhase) *managerv1.Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	jh := f.jobs[jobID]
	for _, in := range jh.Instances {
		if in.Role == role {
			in.NodeId, in.Phase = nodeID, phase
			return in
		}
	}
	in := &managerv1.Instance{JobId: jobID, Role: role, NodeId: nodeID, FencingToken: f.rev, Phase: phase, Desired: managerv1.InstanceDesired_INSTANCE_DESIRED_RUNNING}
	jh.Instances = append(jh.Instances, in)
	return in
}

func (f *fakeAPI) StartJob(ctx context.Context, jobID, role, nodeID string, opts norsk.StartJobOptions) (uint64, error) {
	if err := f.call("StartJob", " ", jobID, "/", role, "@", nodeID); err != nil {
		return 0, err
	}
	in := f.instance(jobID, role, nodeID, managerv1.InstancePhase_INSTANCE_PHASE_PROVISIONED)
	return in.FencingToken, nil
}

func (f *fakeAPI) StartJobs(ctx context.Context, starts []norsk.Start) ([]norsk.StartOutcome, error) {
	return nil, fmt.Errorf("not used")
}

func (f *fakeAPI) StopJob(ctx context.Context, jobID, role, nodeID string, opts norsk.StopJobOptions) error {
	return f.call("StopJob", " ", jobID, "/", role, "@", nodeID)
}

func (f *fakeAPI) StartPreparedJob(ctx context.Context, jobID, role, nodeID string) error {
	return f.call("StartPreparedJob", " ", jobID, "/", role, "@", nodeID)
}

func (f *fakeAPI) MarkJobFailed(ctx context.Context, jobID, reason string) error { return nil }
func (f *fakeAPI) ListBundles(ctx context.Context) ([]*managerv1.BundleWithJobs, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*managerv1.BundleWithJobs
	for _, b := range f.bundles {
		out = append(out, &managerv1.BundleWithJobs{Bundle: proto.Clone(b).(*managerv1.Bundle)})
	}
	return out, nil
}
func (f *fakeAPI) BundleById(ctx context.Context, bundleID string) (*managerv1.BundleWithJobs, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.bundles {
		if b.GetBundleId() == bundleID {
			return &managerv1.BundleWithJobs{Bundle: proto.Clone(b).(*managerv1.Bundle)}, nil
		}
	}
	return nil, &norsk.Error{Op: "BundleById", Message: "no bundle", Code: 5}
}
func (f *fakeAPI) DeleteBundle(ctx context.Context, bundleID string) error { return nil }
func (f *fakeAPI) GetLeaseStatus(ctx context.Context) (*managerv1.LeaseStatus, error) {
	return &managerv1.LeaseStatus{}, nil
}
func (f *fakeAPI) EventStream(ctx context.Context, s norsk.EventStreamSettings) *norsk.EventStream {
	return nil
}
func (f *fakeAPI) CreateMockNode(ctx context.Context, n norsk.MockNode) (string, string, error) {
	return "", "", fmt.Errorf("not used")
}
func (f *fakeAPI) CreateAwsNode(ctx context.Context, n norsk.AwsNode) (*norsk.CloudNode, error) {
	return nil, fmt.Errorf("not used")
}
func (f *fakeAPI) CreateOciNode(ctx context.Context, n norsk.OciNode) (*norsk.CloudNode, error) {
	return nil, fmt.Errorf("not used")
}
func (f *fakeAPI) CreateCloudHypervisorNode(ctx context.Context, n norsk.CloudHypervisorNode) (*norsk.CloudNode, error) {
	return nil, fmt.Errorf("not used")
}
func (f *fakeAPI) SetNodeTags(ctx context.Context, nodeID string, tags map[string]string) (*norsk.Node, error) {
	return nil, fmt.Errorf("not used")
}
func (f *fakeAPI) PrefetchImages(ctx context.Context, nodeID string, refs []string) (*norsk.PrefetchImagesResponse, error) {
	return nil, fmt.Errorf("not used")
}

func (f *fakeAPI) NotifyMigrationGetState(ctx context.Context, source *managerv1.JobKey, id string) error {
	return f.call("GetState", " ", source.GetRole())
}

func (f *fakeAPI) NotifyMigrationCutoverReady(ctx context.Context, source *managerv1.JobKey, id string, payload []byte) error {
	return f.call("CutoverReady", " ", source.GetRole(), " ", string(payload))
}

func (f *fakeAPI) NotifyMigrationCutoverApply(ctx context.Context, target *managerv1.JobKey, id string, payload []byte) error {
	return f.call("CutoverApply", " ", target.GetRole(), " ", string(payload))
}

func (f *fakeAPI) AbortMigration(ctx context.Context, jobID, sourceRole, targetRole, reason, id string) error {
	return f.call("AbortMigration", " ", sourceRole, ",", targetRole)
}

func (f *fakeAPI) RecordMigration(ctx context.Context, st *managerv1.MigrationState, expected uint64, create bool) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ex, ok := f.migs[st.GetMigrationId()]
	switch {
	case create && ok:
		return 0, &norsk.Error{Op: "RecordMigration", Code: 6, Message: "exists"}
	case !create && !ok:
		return 0, &norsk.Error{Op: "RecordMigration", Code: 9, Message: "not recorded"}
	case ok && expected != 0 && ex.GetRevision() != expected:
		return 0, &norsk.Error{Op: "RecordMigration", Code: 9, Message: "revision moved"}
	case ok && terminal(ex.GetPhase()) && ex.GetPhase() != st.GetPhase():
		return 0, &norsk.Error{Op: "RecordMigration", Code: 9, Message: "ended"}
	}
	f.rev++
	n := proto.Clone(st).(*managerv1.MigrationState)
	n.Revision = f.rev
	f.migs[n.GetMigrationId()] = n
	return f.rev, nil
}

func (f *fakeAPI) RecordNodeDrain(ctx context.Context, d *managerv1.NodeDrain, expected uint64) (uint64, error) {
	if err := f.call("RecordNodeDrain", d.GetNodeId()); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, n := range f.nodes {
		if n.GetNodeId() != d.GetNodeId() {
			continue
		}
		if n.GetDrain().GetRevision() != expected {
			return 0, &norsk.Error{Op: "RecordNodeDrain", Code: 9, Message: "revision moved"}
		}
		f.rev++
		c := proto.Clone(n).(*managerv1.Node)
		c.Drain = proto.Clone(d).(*managerv1.NodeDrain)
		c.Drain.Revision = f.rev
		if c.Drain.GetState() != drainRunning && c.Drain.GetEndedAt() == nil {
			c.Drain.EndedAt = timestamppb.Now()
		}
		f.nodes[i] = c
		return f.rev, nil
	}
	return 0, &norsk.Error{Op: "RecordNodeDrain", Code: 5, Message: "no node"}
}

func (f *fakeAPI) ListMigrations(ctx context.Context, jobID string) ([]*managerv1.MigrationState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*managerv1.MigrationState
	for _, m := range f.migs {
		if jobID == "" || m.GetSourceJobId() == jobID {
			out = append(out, proto.Clone(m).(*managerv1.MigrationState))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetMigrationId() < out[j].GetMigrationId() })
	return out, nil
}

func (f *fakeAPI) GetMigration(ctx context.Context, id string) (*managerv1.MigrationState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.migs[id]
	if !ok {
		return nil, &norsk.Error{Op: "GetMigration", Code: 5, Message: "no migration"}
	}
	return proto.Clone(m).(*managerv1.MigrationState), nil
}

// stored is the record the store holds.
func (f *fakeAPI) stored(id string) *managerv1.MigrationState {
	m, _ := f.GetMigration(context.Background(), id)
	return m
}

var _ API = (*fakeAPI)(nil)

func proto_clone(jh *managerv1.JobWithHistory) *managerv1.JobWithHistory {
	return proto.Clone(jh).(*managerv1.JobWithHistory)
}

// sync waits until everything queued before it has been handled (tests).
func (s *Saga) sync(ctx context.Context) error {
	done := make(chan struct{})
	if err := s.do(ctx, func(context.Context) { close(done) }); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
