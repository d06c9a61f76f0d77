package manager_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// stPopulate gives a Manager one of everything the store keeps: jobs with
// history, a slot with a registered worker, an instance, KV keys with a
// schema version, audit entries of several kinds and a pruned prefix.
func stPopulate(t *testing.T, s *manager.Server, c managerv1connect.ManagerClient, clk *clock.Fake) {
	t.Helper()
	ctx := stCtx(t)
	stCreateJobs(t, c, "a", "b")
	j := stJob("a")
	j.Description = "second version"
	j.CurrentHash = s.Store().State().Snapshot().Job(nil, "a").GetJob().GetCurrentHash()
	if _, err := c.UpdateJob(ctx, connect.NewRequest(&managerv1.UpdateJobRequest{Job: j})); err != nil {
		t.Fatal(err)
	}
	reg, err := c.RegisterClusterNode(ctx, connect.NewRequest(&managerv1.RegisterClusterNodeRequest{NodeName: "n1", Pool: "blue"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ClusterMemberRegister(ctx, connect.NewRequest(&managerv1.ClusterMemberRegisterRequest{
		Token: reg.Msg.GetToken(), Address: "127.0.0.1:9", Runtime: "process", WorkerVersion: "test",
	})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store().Apply(ctx, &storev1.Command{Time: timestamppb.New(clk.Now()), Cmd: &storev1.Command_NodeOnline{NodeOnline: &storev1.NodeOnline{
		NodeId: "n1", Hello: &managerv1.WorkerHello{NodeId: "n1", Runtime: "process", WorkerVersion: "test"},
	}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartJob(ctx, connect.NewRequest(&managerv1.StartJobRequest{JobId: "a", Role: "primary", NodeId: "n1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetNodeTags(ctx, connect.NewRequest(&managerv1.SetNodeTagsRequest{NodeId: "n1", Tags: map[string]string{"zone": "x"}})); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	one := int64(1)
	if _, err := c.KvCommit(ctx, connect.NewRequest(&managerv1.KvCommitRequest{Namespace: "app", Options: &managerv1.KvCommitOptions{SetSchemaVersion: &one},
		Writes: []*managerv1.KvWrite{
			{Key: "cfg/a", Op: &managerv1.KvWrite_Put{Put: []byte("1")}},
			{Key: "cfg/b", Op: &managerv1.KvWrite_Put{Put: []byte{0, 1, 2, 255}}},
		}})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendAuditEntry(ctx, connect.NewRequest(&managerv1.AppendAuditEntryRequest{Source: "ops", Kind: "note", Payload: "hello"})); err != nil {
		t.Fatal(err)
	}
	// Everything before the minute is pruned: a checkpoint, a marker.
	if _, err := c.PruneAuditLog(ctx, connect.NewRequest(&managerv1.PruneAuditLogRequest{BeforeTimestampMs: float64(clk.Now().UnixMilli())})); err != nil {
		t.Fatal(err)
	}
	stCreateJobs(t, c, "c")
}

// stAnswers are a Manager's answers to the read calls that show the store.
type stAnswers struct {
	jobs  *managerv1.JobSearchResponse
	slots *managerv1.ListClusterNodesResponse
	kv    *managerv1.KvListResponse
	audit *managerv1.GetAuditLogResponse
}

func stRead(t *testing.T, c managerv1connect.ManagerClient) stAnswers {
	t.Helper()
	ctx := stCtx(t)
	jobs, err := c.JobSearch(ctx, connect.NewRequest(&managerv1.JobSearchRequest{IncludeHistory: true}))
	if err != nil {
		t.Fatal(err)
	}
	slots, err := c.ListClusterNodes(ctx, connect.NewRequest(&managerv1.ListClusterNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := c.KvList(ctx, connect.NewRequest(&managerv1.KvListRequest{Namespace: "app"}))
	if err != nil {
		t.Fatal(err)
	}
	return stAnswers{jobs: jobs.Msg, slots: slots.Msg, kv: kv.Msg, audit: stAuditLog(t, c)}
}

func (a stAnswers) diff(b stAnswers) string {
	var out []string
	// Index/revision fields name the applied index of the answering store,
	// which a restore moves on; the rows must be the same.
	ja, jb := proto.Clone(a.jobs).(*managerv1.JobSearchResponse), proto.Clone(b.jobs).(*managerv1.JobSearchResponse)
	ja.Index, jb.Index = 0, 0
	if !proto.Equal(ja, jb) {
		out = append(out, fmt.Sprintf("jobs:\n%v\n%v", ja, jb))
	}
	if !proto.Equal(a.slots, b.slots) {
		out = append(out, fmt.Sprintf("slots:\n%v\n%v", a.slots, b.slots))
	}
	ka, kb := proto.Clone(a.kv).(*managerv1.KvListResponse), proto.Clone(b.kv).(*managerv1.KvListResponse)
	ka.Revision, kb.Revision = 0, 0
	if !proto.Equal(ka, kb) {
		out = append(out, fmt.Sprintf("kv:\n%v\n%v", ka, kb))
	}
	if !proto.Equal(a.audit, b.audit) {
		out = append(out, fmt.Sprintf("audit:\n%v\n%v", a.audit, b.audit))
	}
	return strings.Join(out, "\n")
}

// TestStoreSnapshotSaveRestoreOffline: SnapshotSave streamed to a file,
// restored offline into a new data dir and booted, gives the same state,
// and new writes carry on after it.
func TestStoreSnapshotSaveRestoreOffline(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(stT0)
	src := t.TempDir()
	s, c := stStart(t, stConfig(src, clk))
	stPopulate(t, s, c, clk)
	want := stRead(t, c)
	if want.audit.GetCheckpoint() == nil || len(want.kv.GetEntries()) != 2 || len(want.jobs.GetJobs()) != 3 {
		t.Fatalf("population incomplete: %v", want)
	}
	file := stSnapshotSave(t, c, filepath.Join(t.TempDir(), "save.nsnap"))
	saved, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The stream is the state's snapshot, byte for byte.
	var direct bytes.Buffer
	if _, err := s.Store().State().Snapshot().WriteTo(&direct); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(direct.Bytes(), saved) {
		t.Error("SnapshotSave's bytes differ from the state's WriteTo")
	}
	savedHeader := stReadRecords(t, saved)[0].GetHeader()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	dst := t.TempDir()
	h, err := manager.RestoreOffline(stCtx(t), stConfig(dst, nil), file)
	if err != nil {
		t.Fatalf("RestoreOffline: %v", err)
	}
	if !proto.Equal(h, savedHeader) {
		t.Errorf("restored header %v, want %v", h, savedHeader)
	}
	if got := manager.MemberName(dst); got != "m1" {
		t.Errorf("member of the restored dir %q, want m1", got)
	}

	s2, c2 := stStart(t, stConfig(dst, clk))
	var after bytes.Buffer
	if _, err := s2.Store().State().Snapshot().WriteTo(&after); err != nil {
		t.Fatal(err)
	}
	if d := stSameRecords(t, saved, after.Bytes()); d != "" {
		t.Errorf("the restored state differs: %s", d)
	}
	got := stRead(t, c2)
	if d := want.diff(got); d != "" {
		t.Errorf("the restored Manager answers differently:\n%s", d)
	}
	if !got.audit.GetChainVerifiedAtBoot() {
		t.Errorf("restored chain not verified: %s", got.audit.GetVerificationDetail())
	}
	if boot := stStoreInfo(t, c2).GetBoot(); boot.GetMigrated() || boot.GetRestoredFromBackup() {
		t.Errorf("boot report %v", boot)
	}

	// Writes go on after everything restored: revisions (and fencing
	// tokens) only grow, and the audit chain continues.
	r, err := c2.KvCommit(stCtx(t), connect.NewRequest(&managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{
		{Key: "cfg/a", Op: &managerv1.KvWrite_Put{Put: []byte("2")}, ExpectedRevision: &want.kv.GetEntries()[0].Revision},
	}}))
	if err != nil {
		t.Fatalf("a write against a restored revision: %v", err)
	}
	if r.Msg.GetRevision() <= savedHeader.GetIndex() {
		t.Errorf("new revision %d not after the snapshot's index %d", r.Msg.GetRevision(), savedHeader.GetIndex())
	}
	log := stAuditLog(t, c2)
	if log.GetLastSeq() != want.audit.GetLastSeq()+1 {
		t.Errorf("audit seq %d after a write, want %d", log.GetLastSeq(), want.audit.GetLastSeq()+1)
	}
	if err := s2.Store().State().Snapshot().VerifyAuditChain(); err != nil {
		t.Errorf("chain after a new write: %v", err)
	}
}

// TestStoreRestoreOfflineRefusesDamagedFiles: a file that is not a
// snapshot is INVALID_ARGUMENT, one that fails its checksum DATA_LOSS, one
// from a newer binary FAILED_PRECONDITION; the target data dir is left
// exactly as it was.
func TestStoreRestoreOfflineRefusesDamagedFiles(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(stT0)
	dir := t.TempDir()
	s, c := stStart(t, stConfig(dir, clk))
	stCreateJobs(t, c, "keep-me")
	good, err := os.ReadFile(stSnapshotSave(t, c, filepath.Join(t.TempDir(), "good.nsnap")))
	if err != nil {
		t.Fatal(err)
	}
	// A running member's dir is refused: it is locked.
	if _, err := manager.RestoreOffline(stCtx(t), stConfig(dir, nil), filepath.Join(t.TempDir(), "any")); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("RestoreOffline into a running member's dir: %v, want it refused as in use", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	newer := stReadRecords(t, good)
	newer[0].GetHeader().SchemaVersion = state.SchemaVersion + 1
	flipped := bytes.Clone(good)
	flipped[bytes.Index(flipped, []byte("keep-me"))] = 'K'
	badTrailer := bytes.Clone(good)
	badTrailer[len(badTrailer)-1] ^= 0x01
	cases := []struct {
		name string
		data []byte // nil: no file at all
		code apierr.Code
	}{
		{"missing file", nil, apierr.InvalidArgument},
		{"empty file", []byte{}, apierr.InvalidArgument},
		{"garbage", bytes.Repeat([]byte("not a snapshot "), 100), apierr.InvalidArgument},
		{"cut in the middle", good[:len(good)/2], apierr.InvalidArgument},
		{"cut before the trailer", good[:len(good)-8], apierr.InvalidArgument},
		{"data after the trailer", append(bytes.Clone(good), good[:20]...), apierr.InvalidArgument},
		{"a byte changed", flipped, apierr.DataLoss},
		{"trailer checksum changed", badTrailer, apierr.DataLoss},
		{"newer schema", stWriteRecords(t, newer), apierr.FailedPrecondition},
	}
	before := stTreeHash(t, dir)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "snap.nsnap")
			if tc.data != nil {
				if err := os.WriteFile(path, tc.data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := manager.RestoreOffline(stCtx(t), stConfig(dir, nil), path)
			if got := apierr.CodeOf(err); err == nil || got != tc.code {
				t.Fatalf("RestoreOffline = %v (%v), want %v", err, got, tc.code)
			}
			if !strings.Contains(err.Error(), path) && tc.data != nil {
				t.Errorf("error %q does not name the file", err)
			}
			// store.ValidateSnapshotFile says the same.
			if _, _, verr := store.ValidateSnapshotFile(path); apierr.CodeOf(verr) != tc.code {
				t.Errorf("ValidateSnapshotFile = %v", verr)
			}
			if after := stTreeHash(t, dir); after != before {
				t.Errorf("the data dir changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			// Into a new directory: nothing is claimed or created but
			// the directory and its lock.
			fresh := filepath.Join(t.TempDir(), "new-member")
			if _, err := manager.RestoreOffline(stCtx(t), stConfig(fresh, nil), path); apierr.CodeOf(err) != tc.code {
				t.Errorf("into a new dir: %v", err)
			}
			for _, p := range []string{"raft", "MEMBER"} {
				if _, err := os.Stat(filepath.Join(fresh, p)); err == nil {
					t.Errorf("a refused restore created %s", p)
				}
			}
		})
	}
	// The member still boots with its own state.
	_, c2 := stStart(t, stConfig(dir, nil))
	if got := strings.Join(stJobIDs(t, c2), ","); got != "keep-me" {
		t.Errorf("jobs after the refused restores: %s", got)
	}
}

var (
	stBinOnce sync.Once
	stBin     string
	stBinErr  error
)

// stManagerBinary builds cmd/norsk-manager once per test process.
func stManagerBinary(t *testing.T) string {
	t.Helper()
	stBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "norsk-manager-store-test-")
		if err != nil {
			stBinErr = err
			return
		}
		stBin = filepath.Join(dir, "norsk-manager")
		// Static, as make test's first pass builds: the race pass (cgo on)
		// then finds the packages compiled instead of compiling them again.
		cmd := exec.Command("go", "build", "-o", stBin, "github.com/norsk-go/norsk-manager/cmd/norsk-manager")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			stBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if stBinErr != nil {
		t.Fatalf("build norsk-manager: %v", stBinErr)
	}
	return stBin
}

// TestStoreSnapshotRestoreCommand: `norsk-manager snapshot restore` as an
// operator runs it.
func TestStoreSnapshotRestoreCommand(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := stManagerBinary(t)
	src := t.TempDir()
	s, c := stStart(t, stConfig(src, nil))
	stCreateJobs(t, c, "x", "y")
	file := stSnapshotSave(t, c, filepath.Join(t.TempDir(), "ops.nsnap"))
	h := stReadRecords(t, mustRead(t, file))[0].GetHeader()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		cmd := exec.CommandContext(stCtx(t), bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}

	dst := filepath.Join(t.TempDir(), "member")
	code, out, errOut := run("snapshot", "restore", "--data-dir", dst, "--node-name", "m1", "--log-level", "warn", file)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	if want := fmt.Sprintf("restored %s into %s: index %d, schema version %d", file, dst, h.GetIndex(), h.GetSchemaVersion()); !strings.Contains(out, want) {
		t.Errorf("output %q, want %q", out, want)
	}
	_, c2 := stStart(t, stConfig(dst, nil))
	if got := strings.Join(stJobIDs(t, c2), ","); got != "x,y" {
		t.Errorf("jobs in the restored member: %s, want x,y", got)
	}

	// A damaged file is refused and changes nothing; usage errors exit 2.
	bad := filepath.Join(t.TempDir(), "bad.nsnap")
	if err := os.WriteFile(bad, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	code, _, errOut = run("snapshot", "restore", "--data-dir", other, "--node-name", "m1", bad)
	if code != 1 || !strings.Contains(errOut, "not a readable snapshot") {
		t.Errorf("damaged file: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(other, "raft")); err == nil {
		t.Error("a refused restore created a store")
	}
	if code, _, errOut = run("snapshot", "restore", file); code != 2 || !strings.Contains(errOut, "--data-dir") {
		t.Errorf("without --data-dir: exit %d, stderr %q", code, errOut)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
