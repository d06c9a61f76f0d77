package state_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func cMigrate(from, to uint32) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_MigrateSchema{MigrateSchema: &storev1.MigrateSchema{From: from, To: to}}}
}

// v1World is a state as a version-1 binary kept it: nodes, jobs and
// instances, no store meta, no audit log, no KV.
func v1World(tb testing.TB) *fixture {
	tb.Helper()
	f := newFixture(tb)
	f.onlineNode("n1")
	f.registerNode("n2")
	f.createJob("job-a")
	f.createJob("job-b")
	f.running("job-a", "primary", "n1")
	return f
}

// v1Snapshot is v1World's snapshot with a version-1 header and only the
// record kinds version 1 had.
func v1Snapshot(tb testing.TB) []byte {
	tb.Helper()
	return rewriteSnapshot(tb, v1World(tb).snap(), func(recs []*storev1.SnapshotRecord) []*storev1.SnapshotRecord {
		out := recs[:0]
		for _, r := range recs {
			switch x := r.GetRecord().(type) {
			case *storev1.SnapshotRecord_Header:
				x.Header.SchemaVersion = 1
			case *storev1.SnapshotRecord_Job, *storev1.SnapshotRecord_Node, *storev1.SnapshotRecord_Instance:
			default:
				tb.Fatalf("a version-1 world has a %T record", x)
			}
			out = append(out, r)
		}
		return out
	})
}

// dataRecords are the job, node and instance records of a snapshot.
func dataRecords(tb testing.TB, snap []byte) [][]byte {
	tb.Helper()
	raw, err := splitRecords(snap)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	for _, b := range raw[1 : len(raw)-1] {
		r := &storev1.SnapshotRecord{}
		if err := proto.Unmarshal(b, r); err != nil {
			tb.Fatal(err)
		}
		switch r.GetRecord().(type) {
		case *storev1.SnapshotRecord_Job, *storev1.SnapshotRecord_Node, *storev1.SnapshotRecord_Instance:
			out = append(out, b)
		}
	}
	return out
}

func TestSchemaVersionInference(t *testing.T) {
	f := newFixture(t)
	if v := f.read().SchemaVersion(); v != 0 {
		t.Errorf("empty state: %d, want 0", v)
	}
	// KV and audit alone are not version-1 data.
	f.must(cAppendAudit("ops", "x", ""))
	if v := f.read().SchemaVersion(); v != 0 {
		t.Errorf("state with only an audit entry: %d, want 0", v)
	}
	for _, tc := range []struct {
		name string
		make func(f *fixture)
	}{
		{"a job", func(f *fixture) { f.createJob("j") }},
		{"a node", func(f *fixture) { f.registerNode("n") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFixture(t)
			tc.make(g)
			if v := g.read().SchemaVersion(); v != 1 {
				t.Errorf("state with data and no meta: %d, want 1", v)
			}
		})
	}
}

func TestMigrateSchemaFromZero(t *testing.T) {
	f := newFixture(t)
	f.must(cMigrate(0, state.SchemaVersion))
	if v := f.read().SchemaVersion(); v != state.SchemaVersion {
		t.Fatalf("schema version %d, want %d", v, state.SchemaVersion)
	}
	chain := f.chain()
	if len(chain) != 1 || chain[0].GetKind() != state.AuditKindCreated || chain[0].GetSource() != state.AuditSourceManager {
		t.Fatalf("chain = %v, want one store-created entry", chain)
	}
	var p map[string]uint32
	if err := json.Unmarshal([]byte(chain[0].GetPayload()), &p); err != nil || p["schemaVersion"] != state.SchemaVersion {
		t.Errorf("payload %q", chain[0].GetPayload())
	}
	// Data written afterwards does not change the recorded version.
	f.createJob("j")
	if v := f.read().SchemaVersion(); v != state.SchemaVersion {
		t.Errorf("schema version %d after a write", v)
	}
	// The version survives a snapshot.
	if v := restoreInto(t, f.snap()).Snapshot().SchemaVersion(); v != state.SchemaVersion {
		t.Errorf("restored schema version %d", v)
	}
}

func TestMigrateSchemaOneToTwo(t *testing.T) {
	f := v1World(t)
	before := dataRecords(t, f.snap())
	if v := f.read().SchemaVersion(); v != 1 {
		t.Fatalf("schema version %d, want 1", v)
	}
	f.must(cMigrate(1, 2))
	if v := f.read().SchemaVersion(); v != 2 {
		t.Fatalf("schema version %d, want 2", v)
	}
	after := dataRecords(t, f.snap())
	if len(after) != len(before) {
		t.Fatalf("%d data records, were %d", len(after), len(before))
	}
	for i := range before {
		if !bytes.Equal(before[i], after[i]) {
			t.Errorf("data record %d changed by the migration", i)
		}
	}
	chain := f.chain()
	if len(chain) != 1 || chain[0].GetSeq() != 1 || chain[0].GetKind() != state.AuditKindMigrated || chain[0].GetTimestampMs() != msAt(f.index) {
		t.Fatalf("chain = %v, want it to start with store-migrated", chain)
	}
	var p map[string]uint32
	if err := json.Unmarshal([]byte(chain[0].GetPayload()), &p); err != nil || p["from"] != 1 || p["to"] != 2 {
		t.Errorf("payload %q", chain[0].GetPayload())
	}
	checkLinked(t, f.read())
}

func TestMigrateSchemaRefusals(t *testing.T) {
	cases := []struct {
		name     string
		setup    func(t *testing.T) *fixture
		from, to uint32
		words    []string
	}{
		{"new store: wrong from", newFixture2, 1, 2, []string{"at schema version 0", "starts from 1"}},
		{"new store: to newer than the binary", newFixture2, 0, state.SchemaVersion + 1, []string{"newer than this binary", "upgrade"}},
		{"new store: to equal to from", newFixture2, 0, 0, []string{"forward"}},
		{"v1: wrong from (0)", v1Fixture, 0, 2, []string{"at schema version 1", "starts from 0"}},
		{"v1: wrong from (2)", v1Fixture, 2, 2, []string{"at schema version 1"}},
		{"v1: to newer than the binary", v1Fixture, 1, state.SchemaVersion + 1, []string{"newer than this binary"}},
		{"v1: to equal to from", v1Fixture, 1, 1, []string{"forward"}},
		{"v1: backwards", v1Fixture, 1, 0, []string{"forward"}},
		{"current: again", currentFixture, state.SchemaVersion, state.SchemaVersion, []string{"forward"}},
		{"current: beyond", currentFixture, state.SchemaVersion, state.SchemaVersion + 1, []string{"newer than this binary"}},
		{"current: from an old version", currentFixture, 1, 2, []string{"at schema version 2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.setup(t)
			f.refused(cMigrate(tc.from, tc.to), apierr.FailedPrecondition, tc.words...)
		})
	}
}

func newFixture2(t *testing.T) *fixture { return newFixture(t) }
func v1Fixture(t *testing.T) *fixture   { return v1World(t) }
func currentFixture(t *testing.T) *fixture {
	f := v1World(t)
	f.must(cMigrate(1, state.SchemaVersion))
	return f
}

// TestVersion1SnapshotRestoresAndMigrates: a snapshot with a version-1
// header and no store meta restores as version 1, with its data, and
// migrates to 2 keeping it.
func TestVersion1SnapshotRestoresAndMigrates(t *testing.T) {
	snap := v1Snapshot(t)
	s := state.New(state.Limits{})
	h, err := s.Restore(bytes.NewReader(snap))
	if err != nil {
		t.Fatalf("restore a version-1 snapshot: %v", err)
	}
	if h.GetSchemaVersion() != 1 {
		t.Errorf("header schema %d", h.GetSchemaVersion())
	}
	if v := s.Snapshot().SchemaVersion(); v != 1 {
		t.Fatalf("restored schema version %d, want 1", v)
	}
	want := v1World(t)
	sameReads(t, want.read(), s.Snapshot())
	idx := s.Snapshot().Index()
	res := s.Apply(idx+1, &storev1.Command{Time: stamp(idx + 1), Cmd: cMigrate(1, 2).Cmd})
	if res.Err != nil {
		t.Fatalf("migrate: %v", res.Err)
	}
	r := s.Snapshot()
	if r.SchemaVersion() != 2 {
		t.Fatalf("schema version %d after migrating", r.SchemaVersion())
	}
	before, after := dataRecords(t, snap), dataRecords(t, snapBytes(t, s))
	if len(before) != len(after) {
		t.Fatalf("%d data records, were %d", len(after), len(before))
	}
	for i := range before {
		if !bytes.Equal(before[i], after[i]) {
			t.Errorf("data record %d changed", i)
		}
	}
	var jobs []string
	r.Jobs(nil, "", func(j *storev1.JobRecord) bool { jobs = append(jobs, j.GetJob().GetJobId()); return true })
	if len(jobs) != 2 || r.Instance(nil, "job-a", "primary").GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_RUNNING {
		t.Errorf("jobs %v, instance %v", jobs, r.Instance(nil, "job-a", "primary"))
	}
	chain := r.AuditChainOldestFirst()
	if len(chain) != 1 || chain[0].GetKind() != state.AuditKindMigrated {
		t.Errorf("chain %v", chain)
	}
	checkLinked(t, r)
}

// TestSnapshotHeaderSchemaOfUnmigratedState: a snapshot of a state that has
// not been migrated yet (a pre-upgrade backup) holds version-1 data; its
// header must say so, or the version-1 binary that the operations guide
// says to roll back with refuses the file ("schema version 2 is newer").
func TestSnapshotHeaderSchemaOfUnmigratedState(t *testing.T) {
	f := v1World(t)
	s := state.New(state.Limits{})
	h, err := s.Restore(bytes.NewReader(f.snap()))
	if err != nil {
		t.Fatal(err)
	}
	if h.GetSchemaVersion() != f.read().SchemaVersion() {
		t.Fatalf("regression: Read.WriteTo (state/snapshot.go) always writes header schema_version %d (the binary's constant), "+
			"even for a state whose data is version %d (no store meta); a pre-upgrade backup therefore claims version %d "+
			"and the version-1 binary refuses it as newer, so the documented rollback (restore the pre-upgrade backup "+
			"with the old binary) cannot work. store.Backup's BackupInfo.SchemaVersion has the same mistake",
			h.GetSchemaVersion(), f.read().SchemaVersion(), h.GetSchemaVersion())
	}
}
