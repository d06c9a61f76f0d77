package manager_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/auditchain"
)

type stAPIPayload struct {
	Who     string `json:"who"`
	Method  string `json:"method"`
	Target  string `json:"target"`
	Outcome string `json:"outcome"`
	Index   uint64 `json:"index"`
}

// TestStoreEveryMutatingRPCIsAudited: each mutating call leaves exactly one
// entry naming the method, the caller and the target, in the same raft
// commit as its change (the entry's index is the change's revision); a
// refused call and an internal (unstamped) write leave none; the chain
// verifies at the end.
func TestStoreEveryMutatingRPCIsAudited(t *testing.T) {
	t.Parallel()
	// The fake clock keeps the node controller from ever declaring the
	// test's worker (which does not exist) lost: no write but the test's.
	clk := clock.NewFake(stT0)
	s, c := stStart(t, stConfig(t.TempDir(), clk))
	ctx := stCtx(t)
	st := s.Store()
	jobIndex := func(id string) uint64 { return st.State().Snapshot().Job(nil, id).GetModifyIndex() }
	nodeIndex := func(id string) uint64 { return st.State().Snapshot().Node(nil, id).GetModifyIndex() }
	// historyIndex is the index of the job's newest history entry.
	historyIndex := func(id string) uint64 { return st.State().Snapshot().Job(nil, id).GetHistory()[0].GetIndex() }

	var token string
	steps := []struct {
		method, target string
		// call makes the call and returns the revision of its change
		// where the answer or the state names one (0: use the applied
		// index after the call).
		call func() (uint64, error)
		// refused: the call must fail and leave no entry.
		refused bool
	}{
		{"CreateJob", "job/a", func() (uint64, error) {
			r, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: stJob("a")}))
			return uint64(r.Msg.GetHash()), err
		}, false},
		{"CreateJob", "job/a", func() (uint64, error) { // duplicate: refused by the handler
			_, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: stJob("a")}))
			return 0, err
		}, true},
		{"UpdateJob", "job/a", func() (uint64, error) {
			j := stJob("a")
			j.Description = "v2"
			j.CurrentHash = jobIndex("a")
			r, err := c.UpdateJob(ctx, connect.NewRequest(&managerv1.UpdateJobRequest{Job: j}))
			if err == nil && r.Msg.GetHash() != jobIndex("a") {
				t.Errorf("UpdateJob hash %d, job modify index %d", r.Msg.GetHash(), jobIndex("a"))
			}
			return uint64(r.Msg.GetHash()), err
		}, false},
		{"CreateJob", "job/b", func() (uint64, error) {
			r, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: stJob("b")}))
			return uint64(r.Msg.GetHash()), err
		}, false},
		{"CreateJob", "job/c", func() (uint64, error) {
			r, err := c.CreateJob(ctx, connect.NewRequest(&managerv1.CreateJobRequest{Job: stJob("c")}))
			return uint64(r.Msg.GetHash()), err
		}, false},
		{"RegisterClusterNode", "node/n1", func() (uint64, error) {
			r, err := c.RegisterClusterNode(ctx, connect.NewRequest(&managerv1.RegisterClusterNodeRequest{NodeName: "n1"}))
			token = r.Msg.GetToken()
			return nodeIndex("n1"), err
		}, false},
		{"ClusterMemberRegister", "worker/127.0.0.1:9", func() (uint64, error) {
			_, err := c.ClusterMemberRegister(ctx, connect.NewRequest(&managerv1.ClusterMemberRegisterRequest{
				Token: token, Address: "127.0.0.1:9", Runtime: "process", WorkerVersion: "test",
				Hardware: &managerv1.Hardware{Vcpus: 2, MemoryBytes: 1 << 30},
			}))
			return nodeIndex("n1"), err
		}, false},
		{"StartJob", "job/a/primary@n1", func() (uint64, error) {
			// The worker's hello is an internal write: no entry.
			before := len(stAuditLog(t, c).GetEntries())
			if _, err := st.Apply(ctx, &storev1.Command{Time: timestamppb.New(clk.Now()), Cmd: &storev1.Command_NodeOnline{NodeOnline: &storev1.NodeOnline{
				NodeId: "n1", Hello: &managerv1.WorkerHello{NodeId: "n1", Runtime: "process", WorkerVersion: "test"},
			}}}); err != nil {
				t.Fatalf("node online: %v", err)
			}
			if after := len(stAuditLog(t, c).GetEntries()); after != before {
				t.Errorf("an internal write left %d audit entries", after-before)
			}
			r, err := c.StartJob(ctx, connect.NewRequest(&managerv1.StartJobRequest{JobId: "a", Role: "primary", NodeId: "n1"}))
			return r.Msg.GetFencingToken(), err
		}, false},
		{"StopJob", "job/a/primary@n1", func() (uint64, error) {
			_, err := c.StopJob(ctx, connect.NewRequest(&managerv1.StopJobRequest{JobId: "a", Role: "primary", NodeId: "n1"}))
			return historyIndex("a"), err
		}, false},
		{"StartJob", "job/b/primary@n1", func() (uint64, error) {
			r, err := c.StartJob(ctx, connect.NewRequest(&managerv1.StartJobRequest{JobId: "b", Role: "primary", NodeId: "n1",
				Options: &managerv1.StartJobOptions{DeferStart: true}}))
			return r.Msg.GetFencingToken(), err
		}, false},
		{"StartPreparedJob", "job/b/primary@n1", func() (uint64, error) {
			_, err := c.StartPreparedJob(ctx, connect.NewRequest(&managerv1.StartPreparedJobRequest{JobId: "b", Role: "primary", NodeId: "n1"}))
			return 0, err // no history entry: the applied index
		}, false},
		{"CompleteJob", "job/c", func() (uint64, error) {
			_, err := c.CompleteJob(ctx, connect.NewRequest(&managerv1.CompleteJobRequest{JobId: "c"}))
			return historyIndex("c"), err
		}, false},
		{"MarkJobFailed", "job/b", func() (uint64, error) {
			_, err := c.MarkJobFailed(ctx, connect.NewRequest(&managerv1.MarkJobFailedRequest{JobId: "b", Reason: "encoder gave up"}))
			return historyIndex("b"), err
		}, false},
		{"SetNodeTags", "node/n1", func() (uint64, error) {
			_, err := c.SetNodeTags(ctx, connect.NewRequest(&managerv1.SetNodeTagsRequest{NodeId: "n1", Tags: map[string]string{"zone": "a"}}))
			return nodeIndex("n1"), err
		}, false},
		{"SetNodeIdleExpiry", "node/n1", func() (uint64, error) {
			_, err := c.SetNodeIdleExpiry(ctx, connect.NewRequest(&managerv1.SetNodeIdleExpiryRequest{NodeId: "n1", IdleExpiryMs: 60_000}))
			return nodeIndex("n1"), err
		}, false},
		{"SetClusterNodePool", "node/n1", func() (uint64, error) {
			_, err := c.SetClusterNodePool(ctx, connect.NewRequest(&managerv1.SetClusterNodePoolRequest{NodeId: "n1", Pool: "gold"}))
			return nodeIndex("n1"), err
		}, false},
		{"KvCommit", "kv/settings", func() (uint64, error) {
			r, err := c.KvCommit(ctx, connect.NewRequest(&managerv1.KvCommitRequest{Namespace: "settings", Writes: []*managerv1.KvWrite{
				{Key: "k", Op: &managerv1.KvWrite_Put{Put: []byte("v")}},
			}}))
			return uint64(r.Msg.GetRevision()), err
		}, false},
		{"KvCommit", "kv/settings", func() (uint64, error) { // refused by the FSM: the key exists
			zero := uint64(0)
			_, err := c.KvCommit(ctx, connect.NewRequest(&managerv1.KvCommitRequest{Namespace: "settings", Writes: []*managerv1.KvWrite{
				{Key: "k", Op: &managerv1.KvWrite_Put{Put: []byte("v")}, ExpectedRevision: &zero},
			}}))
			return 0, err
		}, true},
		{"RegisterClusterNode", "node/n2", func() (uint64, error) {
			_, err := c.RegisterClusterNode(ctx, connect.NewRequest(&managerv1.RegisterClusterNodeRequest{NodeName: "n2"}))
			return nodeIndex("n2"), err
		}, false},
		{"DeregisterClusterNode", "node/n2", func() (uint64, error) {
			_, err := c.DeregisterClusterNode(ctx, connect.NewRequest(&managerv1.DeregisterClusterNodeRequest{NodeId: "n2"}))
			return 0, err
		}, false},
		{"TerminateNode", "node/n1", func() (uint64, error) {
			_, err := c.TerminateNode(ctx, connect.NewRequest(&managerv1.TerminateNodeRequest{NodeId: "n1"}))
			return 0, err
		}, false},
		{"DeleteJob", "job/c", func() (uint64, error) {
			_, err := c.DeleteJob(ctx, connect.NewRequest(&managerv1.DeleteJobRequest{JobId: "c"}))
			return 0, err
		}, false},
	}
	var lastIndex uint64
	for i, step := range steps {
		before := stAuditLog(t, c)
		rev, err := step.call()
		after := stAuditLog(t, c)
		added := len(after.GetEntries()) - len(before.GetEntries())
		name := step.method + " " + step.target
		if step.refused {
			if err == nil {
				t.Fatalf("step %d %s: accepted, want a refusal", i, name)
			}
			if added != 0 {
				t.Errorf("step %d %s: a refused call left %d entries", i, name, added)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d %s: %v", i, name, err)
		}
		if added != 1 {
			t.Fatalf("step %d %s: %d entries, want 1", i, name, added)
		}
		e := after.GetEntries()[0]
		var p stAPIPayload
		if err := json.Unmarshal([]byte(e.GetPayload()), &p); err != nil {
			t.Fatalf("step %d %s: payload %q: %v", i, name, e.GetPayload(), err)
		}
		applied := st.State().Snapshot().Index()
		if rev == 0 {
			// No revision to compare with: the entry is the call's newest
			// write. (The node controller may write after a call, e.g. a
			// NodeTerminated after TerminateNode, so the applied index is
			// an upper bound only.)
			if p.Index <= lastIndex || p.Index > applied {
				t.Errorf("step %d %s: entry index %d not in (%d, %d]", i, name, p.Index, lastIndex, applied)
			}
			rev = p.Index
		}
		lastIndex = p.Index
		if e.GetSource() != state.AuditSourceAPI || e.GetKind() != step.method || p.Method != step.method || p.Target != step.target ||
			!strings.HasPrefix(p.Who, "token:bootstrap/") || !strings.Contains(p.Who, " from 127.0.0.1:") || p.Outcome != "ok" {
			t.Errorf("step %d %s: entry %v payload %+v", i, name, e, p)
		}
		if p.Index != rev {
			t.Errorf("step %d %s: entry index %d, the change's revision %d: not the same commit", i, name, p.Index, rev)
		}
		if want := float64(clk.Now().UnixNano()) / 1e6; e.GetTimestampMs() != want {
			t.Errorf("step %d %s: timestamp %v, want the call's %v", i, name, e.GetTimestampMs(), want)
		}
	}

	// The caller's own entry is the only entry of its call.
	before := len(stAuditLog(t, c).GetEntries())
	ap, err := c.AppendAuditEntry(ctx, connect.NewRequest(&managerv1.AppendAuditEntryRequest{Source: "ops", Kind: "maintenance", Payload: `{"ticket":42}`}))
	if err != nil {
		t.Fatal(err)
	}
	log := stAuditLog(t, c)
	if len(log.GetEntries()) != before+1 || log.GetEntries()[0].GetSeq() != ap.Msg.GetEntry().GetSeq() ||
		log.GetEntries()[0].GetSource() != "external/ops" || log.GetEntries()[0].GetKind() != "maintenance" ||
		!strings.HasPrefix(log.GetEntries()[0].GetCaller(), "token:bootstrap/") {
		t.Errorf("AppendAuditEntry: %d entries (were %d), newest %v", len(log.GetEntries()), before, log.GetEntries()[0])
	}
	if _, err := c.AppendAuditEntry(ctx, connect.NewRequest(&managerv1.AppendAuditEntryRequest{Kind: "x"})); stCode(err) != connect.CodeInvalidArgument {
		t.Errorf("AppendAuditEntry without a source: %v, want INVALID_ARGUMENT", err)
	}

	// Prune leaves its marker naming the caller; the chain still verifies,
	// as a client re-checks it.
	pr, err := c.PruneAuditLog(ctx, connect.NewRequest(&managerv1.PruneAuditLogRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	log = stAuditLog(t, c)
	if len(log.GetEntries()) != 1 || log.GetEntries()[0].GetKind() != state.AuditKindPruned || !strings.Contains(log.GetEntries()[0].GetPayload(), `"who":"token:bootstrap/`) {
		t.Errorf("after prune: %v", log.GetEntries())
	}
	if log.GetCheckpoint().GetSeq() != pr.Msg.GetCheckpointSeq() || pr.Msg.GetRemoved() != int64(before+1) {
		t.Errorf("prune answer %v, checkpoint %v", pr.Msg, log.GetCheckpoint())
	}
	if _, err := c.PruneAuditLog(ctx, connect.NewRequest(&managerv1.PruneAuditLogRequest{BeforeTimestampMs: float64(clk.Now().UnixMilli() + 1000)})); stCode(err) != connect.CodeInvalidArgument {
		t.Errorf("prune of the future: %v, want INVALID_ARGUMENT", err)
	}
	entries := slices.Clone(log.GetEntries())
	slices.Reverse(entries)
	if err := auditchain.Verify(log.GetCheckpoint(), entries); err != nil {
		t.Errorf("client-side verification: %v", err)
	}
}

// TestAuditAppendCannotForgeTheManagersEntries (issue 12, item 3): an
// operator's and a publisher's AppendAuditEntry, trying each source the
// Manager writes itself with kinds of real entries, is stored under
// "external/<source>" with its caller (token name and id) recorded and
// hashed; no entry of a real source appears, a filter on a real source
// does not find it, and the chain verifies client-side.
func TestAuditAppendCannotForgeTheManagersEntries(t *testing.T) {
	t.Parallel()
	s, admin := stStart(t, stConfig(t.TempDir(), clock.NewFake(stT0)))
	ctx := stCtx(t)
	for _, role := range []string{state.RoleOperator, state.RolePublisher} {
		tr, err := admin.CreateToken(ctx, connect.NewRequest(&managerv1.CreateTokenRequest{Name: "forger-" + role, Role: role}))
		if err != nil {
			t.Fatal(err)
		}
		tokenID := tr.Msg.GetToken().GetId()
		c := managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithGRPC(), auth.WithBearer(tr.Msg.GetSecret()))
		for _, forged := range []struct{ source, kind, payload string }{
			{state.AuditSourceAPI, "RevokeToken", `{"who":"token:bootstrap/abc from 127.0.0.1:1","method":"RevokeToken","target":"token/x","outcome":"ok","index":7}`},
			{state.AuditSourceManager, state.AuditKindPruned, `{"removed":0}`},
			{state.AuditSourceManager, "BootstrapToken", `{}`},
			{state.AuditSourceExternal + "api", "note", `{}`},
		} {
			res, err := c.AppendAuditEntry(ctx, connect.NewRequest(&managerv1.AppendAuditEntryRequest{Source: forged.source, Kind: forged.kind, Payload: forged.payload}))
			if err != nil {
				t.Fatalf("%s appending as %q: %v", role, forged.source, err)
			}
			e := res.Msg.GetEntry()
			want := state.AuditSourceExternal + strings.TrimPrefix(forged.source, state.AuditSourceExternal)
			if e.GetSource() != want || e.GetCaller() != "token:forger-"+role+"/"+tokenID || e.GetCallerTokenId() != tokenID ||
				e.GetHashVersion() != auditchain.VersionCaller || e.GetHash() != auditchain.EntryHash(e) {
				t.Errorf("%s appending as %q stored %v; want source %q and its caller", role, forged.source, e, want)
			}
		}
		for _, bad := range []string{"", state.AuditSourceExternal, strings.Repeat("s", api.MaxAuditSubSourceLen+1)} {
			if _, err := c.AppendAuditEntry(ctx, connect.NewRequest(&managerv1.AppendAuditEntryRequest{Source: bad, Kind: "k"})); stCode(err) != connect.CodeInvalidArgument {
				t.Errorf("%s appending with source %.20q: %v, want INVALID_ARGUMENT", role, bad, err)
			}
		}
	}
	log := stAuditLog(t, admin)
	for _, e := range log.GetEntries() {
		if (e.GetSource() == state.AuditSourceAPI || e.GetSource() == state.AuditSourceManager) && strings.HasPrefix(e.GetCaller(), "token:forger-") {
			t.Errorf("a forger's entry passes for the Manager's: %v", e)
		}
		if e.GetSource() == state.AuditSourceAPI && e.GetKind() == "RevokeToken" {
			t.Errorf("an api RevokeToken entry exists though no token was revoked: %v", e)
		}
	}
	for _, src := range []string{state.AuditSourceAPI, state.AuditSourceManager} {
		res, err := admin.GetAuditLog(ctx, connect.NewRequest(&managerv1.GetAuditLogRequest{Source: src}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range res.Msg.GetEntries() {
			if strings.HasPrefix(e.GetCaller(), "token:forger-") {
				t.Errorf("GetAuditLog{source: %s} returns a forger's entry %v", src, e)
			}
		}
	}
	entries := slices.Clone(log.GetEntries())
	slices.Reverse(entries)
	if err := auditchain.Verify(log.GetCheckpoint(), entries); err != nil {
		t.Fatalf("the chain does not verify: %v", err)
	}
}
