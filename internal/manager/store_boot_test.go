package manager_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// stScheduledBackup starts a Manager with scheduled backups every minute on
// a fake clock, and returns a function that takes one scheduled backup and
// returns once it is written (the backup loop's next timer is created after
// the backup).
func stScheduledBackup(t *testing.T, dir string) (*manager.Server, managerv1connect.ManagerClient, func() store.BackupInfo) {
	t.Helper()
	clk := clock.NewFake(stT0)
	cfg := stConfig(dir, clk)
	cfg.BackupInterval = time.Minute
	s, c := stStart(t, cfg)
	ctx := stCtx(t)
	// The backup loop's first timer. No node exists, so the loop is the
	// only user of the clock's timers.
	select {
	case <-clk.TimerCreated():
	case <-ctx.Done():
		t.Fatal("the backup loop never set its timer")
	}
	backupDir := filepath.Join(dir, "backups")
	take := func() store.BackupInfo {
		t.Helper()
		clk.Advance(time.Minute)
		select {
		case <-clk.TimerCreated():
		case <-ctx.Done():
			t.Fatal("the backup loop did not come round")
		}
		bs, err := store.ListBackups(backupDir)
		if err != nil || len(bs) == 0 {
			t.Fatalf("no backup after the interval: %v %v", bs, err)
		}
		if bs[0].Reason != store.BackupScheduled || !bs[0].CreatedAt.Equal(clk.Now()) {
			t.Fatalf("newest backup %+v, want a scheduled one at %v", bs[0], clk.Now())
		}
		return bs[0]
	}
	return s, c, take
}

// stCorruptions damage a closed member's raft store in ways that make it
// unreadable.
var stCorruptions = []struct {
	name string
	do   func(t *testing.T, raftDir string)
}{
	{"meta database overwritten", func(t *testing.T, raftDir string) {
		p := filepath.Join(raftDir, "wal", "wal-meta.db")
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte("garbage!"), int(st.Size()/8)+1), 0o600); err != nil {
			t.Fatal(err)
		}
	}},
	{"meta database truncated to nothing", func(t *testing.T, raftDir string) {
		if err := os.WriteFile(filepath.Join(raftDir, "wal", "wal-meta.db"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}},
	{"newest segment overwritten", func(t *testing.T, raftDir string) {
		p := stNewestSegment(t, raftDir)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte{0xA5}, int(st.Size())), 0o600); err != nil {
			t.Fatal(err)
		}
	}},
	{"a committed command damaged in the log", func(t *testing.T, raftDir string) {
		// The first byte of the job id "bravo" becomes 0x9D: the entry's
		// frame is intact, its command no longer decodes (invalid UTF-8).
		stPatchSegment(t, raftDir, func(b []byte) {
			i := bytes.Index(b, []byte("bravo"))
			if i < 0 {
				t.Fatal(`"bravo" not found in the segment`)
			}
			b[i] ^= 0xFF
		})
	}},
	{"a committed value altered, still decoding", func(t *testing.T, raftDir string) {
		// Issue 12 item 4: 16 bytes of job bravo's description are
		// overwritten. The command still decodes (it is valid UTF-8), so
		// only its checksum tells.
		stPatchSegment(t, raftDir, func(b []byte) {
			i := bytes.Index(b, []byte(strings.Repeat("d", 200)))
			if i < 0 {
				t.Fatal("bravo's description not found in the segment")
			}
			copy(b[i+100:], "XXXXXXXXXXXXXXXX")
		})
	}},
	{"a log entry's encoding damaged", func(t *testing.T, raftDir string) {
		// The entry's data length (raft-wal's codec: index, term, type,
		// len(data), data) is made far longer than the entry. The data is
		// the command, which opens with its time: 0a 06 08 <seconds>.
		stPatchSegment(t, raftDir, func(b []byte) {
			i := bytes.Index(b, []byte("bravo"))
			j := bytes.LastIndex(b[:max(i, 0)], []byte{0x0a, 0x06, 0x08})
			if i < 0 || j < 2 || b[j-2]&0x80 == 0 {
				t.Fatalf("cannot find a two-byte data length before the command of job bravo (%d, %d)", i, j)
			}
			b[j-1] = 0x7F
		})
	}},
}

func stPatchSegment(t *testing.T, raftDir string, patch func([]byte)) {
	t.Helper()
	p := stNewestSegment(t, raftDir)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	patch(b)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func stNewestSegment(t *testing.T, raftDir string) string {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(raftDir, "wal", "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no segment files")
	}
	slices.Sort(segs)
	return segs[len(segs)-1]
}

// stBootOrBug starts a Manager on a damaged store with a bounded wait and
// turns the two ways it is known to fail into skips naming the bug: raft
// panics in NewRaft on an entry it cannot read, and a store whose log lost
// its configuration waits for a leadership that never comes (with the
// daemon's context, which has no deadline, forever).
func stBootOrBug(t *testing.T, cfg manager.Config) (s *manager.Server, c managerv1connect.ManagerClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(stCtx(t), 10*time.Second)
	defer cancel()
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("regression: manager.New panics on a damaged raft log (%v): raft.NewRaft panics when a log entry "+
					"cannot be read, store.Open (internal/store/store.go) does not recover it into an error, so openStore "+
					"never restores the newest backup and the daemon crashes at every boot", p)
			}
		}()
		s, err = manager.New(ctx, cfg)
	}()
	if err != nil && strings.Contains(err.Error(), "waiting to lead") {
		t.Fatalf("regression: the store cannot be read (its log lost the raft configuration: raft logs \"no known peers, aborting "+
			"election\"), but store.Open waits to lead until the context ends, and openStore then returns without "+
			"trying a backup (it gives up when ctx.Err() != nil). The daemon passes a context with no deadline, so it hangs "+
			"at boot forever: %v", err)
	}
	if err != nil {
		t.Fatalf("boot on a damaged store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, stClient(s)
}

// TestStoreBootRestoresNewestBackupWhenUnreadable: a member whose raft
// store cannot be read boots from its newest backup, moves the unreadable
// store aside, and says so in GetStoreInfo.
func TestStoreBootRestoresNewestBackupWhenUnreadable(t *testing.T) {
	t.Parallel()
	for _, corrupt := range stCorruptions {
		t.Run(corrupt.name, func(t *testing.T) {
			t.Parallel() // each damages and boots a store of its own
			dir := t.TempDir()
			s, c, backup := stScheduledBackup(t, dir)
			stCreateJobs(t, c, "alpha")
			// A description long enough that the command's length takes
			// two bytes in the log's encoding.
			bravo := stJob("bravo")
			bravo.Description = strings.Repeat("d", 200)
			if _, err := c.CreateJob(stCtx(t), connect.NewRequest(&managerv1.CreateJobRequest{Job: bravo})); err != nil {
				t.Fatal(err)
			}
			b := backup()
			stCreateJobs(t, c, "after-backup")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			raftDir := filepath.Join(dir, "raft")
			corrupt.do(t, raftDir)

			s2, c2 := stBootOrBug(t, stConfig(dir, nil))
			boot := stStoreInfo(t, c2).GetBoot()
			jobs := strings.Join(stJobIDs(t, c2), ",")
			if !boot.GetRestoredFromBackup() && jobs != "after-backup,alpha,bravo" {
				t.Fatalf("regression: a committed raft entry that no longer decodes is skipped at replay (internal/store/fsm.go "+
					"logs \"undecodable raft command\" and applies a no-op), so the store boots without it and without "+
					"restoring a backup or saying anything in GetStoreInfo: jobs now %q, were after-backup,alpha,bravo "+
					"(raft-wal only checks the CRC of the last commit of the tail segment)", jobs)
			}
			// Writes after the backup are lost; that is what the
			// operations guide says.
			if jobs != "alpha,bravo" {
				t.Errorf("jobs after the restore: %s, want alpha,bravo (the backup's)", jobs)
			}
			if !boot.GetRestoredFromBackup() || boot.GetRestoredBackup() != b.Path || boot.GetRestoreReason() == "" {
				t.Fatalf("boot report %v, want restored from %s with a reason", boot, b.Path)
			}
			moved := boot.GetUnreadableStoreMovedTo()
			if !strings.HasPrefix(moved, raftDir+".unreadable-") {
				t.Errorf("moved to %q, want %s.unreadable-…", moved, raftDir)
			}
			if _, err := os.Stat(filepath.Join(moved, "wal", "wal-meta.db")); err != nil {
				t.Errorf("the unreadable store is not where the report says: %v", err)
			}
			// New writes get revisions past everything restored.
			res, err := c2.CreateJob(stCtx(t), connect.NewRequest(&managerv1.CreateJobRequest{Job: stJob("c")}))
			if err != nil {
				t.Fatal(err)
			}
			if res.Msg.GetHash() <= b.Index {
				t.Errorf("new write at index %d, not after the backup's %d", res.Msg.GetHash(), b.Index)
			}
			if err := s2.Close(); err != nil {
				t.Fatal(err)
			}
			// The restored store is the member's store now: the next boot
			// reads it as it is.
			_, c3 := stStart(t, stConfig(dir, nil))
			if got := strings.Join(stJobIDs(t, c3), ","); got != "alpha,bravo,c" {
				t.Errorf("jobs after another restart: %s, want alpha,bravo,c", got)
			}
			if boot := stStoreInfo(t, c3).GetBoot(); boot.GetRestoredFromBackup() || boot.GetMigrated() {
				t.Errorf("a clean boot reports %v", boot)
			}
		})
	}
}

// TestStoreBootSkipsABackupThatDoesNotVerify: the newest backup is damaged,
// so the boot restores the one before it.
func TestStoreBootSkipsABackupThatDoesNotVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, c, backup := stScheduledBackup(t, dir)
	stCreateJobs(t, c, "a")
	older := backup()
	stCreateJobs(t, c, "b")
	newer := backup()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(newer.Path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(data, []byte("hello:dev"))
	data[i] = 'j' // a flipped byte: fails the checksum
	if err := os.WriteFile(newer.Path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	stCorruptions[0].do(t, filepath.Join(dir, "raft"))

	_, c2 := stStart(t, stConfig(dir, nil))
	boot := stStoreInfo(t, c2).GetBoot()
	if boot.GetRestoredBackup() != older.Path {
		t.Errorf("restored %q, want the older backup %s (the newer one is damaged)", boot.GetRestoredBackup(), older.Path)
	}
	if got := strings.Join(stJobIDs(t, c2), ","); got != "a" {
		t.Errorf("jobs %s, want a", got)
	}
}

// TestStoreBootFailsWithoutBackup: an unreadable store and no backup: the
// boot fails and says why; nothing is moved.
func TestStoreBootFailsWithoutBackup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		backups func(t *testing.T, dir string)
	}{
		{"no backup directory", func(t *testing.T, dir string) {}},
		{"only a damaged backup", func(t *testing.T, dir string) {
			bd := filepath.Join(dir, "backups")
			if err := os.MkdirAll(bd, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(bd, "scheduled-20260102T030405.000Z-7.nsnap"), []byte("not a snapshot"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, c := stStart(t, stConfig(dir, nil))
			stCreateJobs(t, c, "a")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			raftDir := filepath.Join(dir, "raft")
			stCorruptions[0].do(t, raftDir)
			tc.backups(t, dir)
			before := stTreeHash(t, dir)

			s2, err := manager.New(stCtx(t), stConfig(dir, nil))
			if err == nil {
				_ = s2.Close()
				t.Fatal("the Manager booted on an unreadable store with no backup")
			}
			msg := err.Error()
			for _, want := range []string{"no backup in " + filepath.Join(dir, "backups"), raftDir} {
				if !strings.Contains(msg, want) {
					t.Errorf("boot error %q does not name %q", msg, want)
				}
			}
			if after := stTreeHash(t, dir); after != before {
				t.Errorf("the failed boot changed the data dir:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// stV1Snapshot is a snapshot as a version-1 binary wrote it: a version-1
// header; nodes and jobs; no store meta, audit log or KV.
func stV1Snapshot(t *testing.T, path string) []string {
	t.Helper()
	s := state.New(state.Limits{})
	var idx uint64
	apply := func(cmd *storev1.Command) {
		idx++
		cmd.Time = timestamppb.New(stT0.Add(-time.Hour).Add(time.Duration(idx) * time.Second))
		if res := s.Apply(idx, cmd); res.Err != nil {
			t.Fatalf("build v1 state: %v", res.Err)
		}
	}
	apply(&storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{NodeId: "n1", NodeName: "n1", Token: "tok-n1"}}})
	jobs := []string{"legacy-1", "legacy-2", "legacy-3"}
	for _, id := range jobs {
		apply(&storev1.Command{Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: stJob(id)}}})
	}
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	recs := stReadRecords(t, buf.Bytes())
	recs[0].GetHeader().SchemaVersion = 1
	for _, r := range recs[1:] {
		switch r.GetRecord().(type) {
		case *storev1.SnapshotRecord_Job, *storev1.SnapshotRecord_Node:
		default:
			t.Fatalf("unexpected record %T in a v1 state", r.GetRecord())
		}
	}
	if err := os.WriteFile(path, stWriteRecords(t, recs), 0o600); err != nil {
		t.Fatal(err)
	}
	return jobs
}

// TestStoreBootMigratesVersion1: a data dir holding version-1 data boots
// with a pre-upgrade backup taken before the migration, migrates to the
// binary's version keeping the data, and says so.
func TestStoreBootMigratesVersion1(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fixture := filepath.Join(t.TempDir(), "v1.nsnap")
	jobs := stV1Snapshot(t, fixture)
	h, err := manager.RestoreOffline(stCtx(t), stConfig(dir, nil), fixture)
	if err != nil {
		t.Fatalf("RestoreOffline: %v", err)
	}
	if h.GetSchemaVersion() != 1 {
		t.Fatalf("restored header schema %d, want 1", h.GetSchemaVersion())
	}

	clk := clock.NewFake(stT0)
	s, c := stStart(t, stConfig(dir, clk))
	info := stStoreInfo(t, c)
	boot := info.GetBoot()
	if !boot.GetMigrated() || boot.GetMigratedFrom() != 1 || boot.GetMigratedTo() != state.SchemaVersion || boot.GetPreUpgradeBackup() == "" {
		t.Fatalf("boot report %v, want migrated 1→%d after a pre-upgrade backup", boot, state.SchemaVersion)
	}
	if boot.GetRestoredFromBackup() {
		t.Errorf("boot report says restored from a backup: %v", boot)
	}
	if st := info.GetStores(); len(st) != 1 || st[0].GetSchemaVersion() != state.SchemaVersion || st[0].GetBinarySchemaVersion() != state.SchemaVersion {
		t.Errorf("stores %v", st)
	}
	var listed *managerv1.BackupInfo
	for _, b := range info.GetBackups() {
		if b.GetPath() == boot.GetPreUpgradeBackup() {
			listed = b
		}
	}
	if listed == nil || listed.GetReason() != store.BackupPreUpgrade || !listed.GetCreatedAt().AsTime().Equal(stT0) {
		t.Errorf("backups %v do not list the pre-upgrade backup %s", info.GetBackups(), boot.GetPreUpgradeBackup())
	}

	// The backup holds the version-1 data as it was before the migration.
	if _, _, err := store.ValidateSnapshotFile(boot.GetPreUpgradeBackup()); err != nil {
		t.Fatalf("the pre-upgrade backup does not verify: %v", err)
	}
	f, err := os.Open(boot.GetPreUpgradeBackup())
	if err != nil {
		t.Fatal(err)
	}
	pre := state.New(state.Limits{})
	_, err = pre.Restore(f)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pr := pre.Snapshot()
	if pr.SchemaVersion() != 1 || len(pr.AuditChainOldestFirst()) != 0 {
		t.Errorf("pre-upgrade backup: schema %d, %d audit entries; want version-1 data, no audit log", pr.SchemaVersion(), len(pr.AuditChainOldestFirst()))
	}
	if cur := s.Store().State().Snapshot().Index(); pr.Index() >= cur {
		t.Errorf("pre-upgrade backup at index %d, the migrated store at %d: the backup must come first", pr.Index(), cur)
	}
	var preJobs []string
	pr.Jobs(nil, "", func(j *storev1.JobRecord) bool { preJobs = append(preJobs, j.GetJob().GetJobId()); return true })
	if !slices.Equal(preJobs, jobs) {
		t.Errorf("pre-upgrade backup jobs %v, want %v", preJobs, jobs)
	}
	t.Run("backup header names the data's version", func(t *testing.T) {
		if listed.GetSchemaVersion() != 1 {
			t.Fatalf("regression: the pre-upgrade backup's header says schema version %d though it holds version-1 data "+
				"(state.Read.WriteTo writes the binary's constant); GetStoreInfo lists it as %d and a version-1 binary would refuse it",
				listed.GetSchemaVersion(), listed.GetSchemaVersion())
		}
	})

	// The data is intact.
	if got := stJobIDs(t, c); !slices.Equal(got, jobs) {
		t.Errorf("jobs %v, want %v", got, jobs)
	}
	slots, err := c.ListClusterNodes(stCtx(t), connect.NewRequest(&managerv1.ListClusterNodesRequest{}))
	if err != nil || len(slots.Msg.GetSlots()) != 1 {
		t.Errorf("slots %v %v, want n1", slots, err)
	}
	// The audit log starts with the migration and verifies.
	log := stAuditLog(t, c)
	if n := len(log.GetEntries()); n == 0 {
		t.Fatal("empty audit log")
	}
	first := log.GetEntries()[len(log.GetEntries())-1]
	if first.GetSeq() != 1 || first.GetKind() != state.AuditKindMigrated || first.GetSource() != state.AuditSourceManager {
		t.Errorf("first audit entry %v, want store-migrated", first)
	}
	if !log.GetChainVerifiedAtBoot() {
		t.Errorf("chain not verified at boot: %s", log.GetVerificationDetail())
	}

	// A second boot has nothing to migrate and takes no second backup.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, c2 := stStart(t, stConfig(dir, nil))
	info2 := stStoreInfo(t, c2)
	if info2.GetBoot().GetMigrated() || info2.GetBoot().GetPreUpgradeBackup() != "" {
		t.Errorf("second boot report %v", info2.GetBoot())
	}
	if len(info2.GetBackups()) != len(info.GetBackups()) {
		t.Errorf("%d backups after the second boot, were %d", len(info2.GetBackups()), len(info.GetBackups()))
	}
}

// TestStoreBootNewStoreIsCreatedAtCurrentVersion: a new data dir starts at
// the binary's version with a store-created entry and no backup.
func TestStoreBootNewStoreIsCreatedAtCurrentVersion(t *testing.T) {
	t.Parallel()
	_, c := stStart(t, stConfig(t.TempDir(), nil))
	info := stStoreInfo(t, c)
	if info.GetStores()[0].GetSchemaVersion() != state.SchemaVersion || info.GetBoot().GetMigrated() || len(info.GetBackups()) != 0 {
		t.Errorf("store info %v", info)
	}
	// Newest first: the bootstrap admin token, then store-created.
	log := stAuditLog(t, c)
	if e := log.GetEntries(); len(e) != 2 || e[1].GetKind() != state.AuditKindCreated || e[0].GetKind() != "BootstrapToken" ||
		e[0].GetSource() != state.AuditSourceManager || !log.GetChainVerifiedAtBoot() {
		t.Errorf("audit log %v", log)
	}
}

// TestStoreBootReportsTamperedAuditChain: a store whose audit chain was
// edited (a snapshot with one entry's payload changed and the file
// re-sealed) boots, but reports the chain unverified, naming the entry.
func TestStoreBootReportsTamperedAuditChain(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	s, c := stStart(t, stConfig(src, nil))
	stCreateJobs(t, c, "a", "b", "c")
	good := stSnapshotSave(t, c, filepath.Join(t.TempDir(), "good.nsnap"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	// Entry 1 is store-created, 2 the bootstrap token; 3..5 are the three
	// CreateJob calls.
	recs := stReadRecords(t, data)
	edited := false
	for _, r := range recs {
		if e := r.GetAuditEntry(); e != nil && e.GetSeq() == 4 {
			e.Payload = strings.Replace(e.GetPayload(), "job/b", "job/z", 1)
			edited = true
		}
	}
	if !edited {
		t.Fatal("no audit entry 4 in the snapshot")
	}
	bad := filepath.Join(t.TempDir(), "bad.nsnap")
	if err := os.WriteFile(bad, stWriteRecords(t, recs), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, file string
		ok         bool
	}{
		{"untouched", good, true},
		{"entry 4 edited", bad, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := manager.RestoreOffline(stCtx(t), stConfig(dir, nil), tc.file); err != nil {
				t.Fatalf("RestoreOffline: %v", err)
			}
			_, c := stStart(t, stConfig(dir, nil))
			log := stAuditLog(t, c)
			if log.GetChainVerifiedAtBoot() != tc.ok {
				t.Fatalf("chain_verified_at_boot = %v (%s), want %v", log.GetChainVerifiedAtBoot(), log.GetVerificationDetail(), tc.ok)
			}
			if tc.ok {
				if log.GetVerificationDetail() != "" {
					t.Errorf("detail %q on a verified chain", log.GetVerificationDetail())
				}
				return
			}
			if d := log.GetVerificationDetail(); !strings.Contains(d, "entry 4") {
				t.Errorf("verification detail %q does not name entry 4", d)
			}
			// The log is still served, entries and all.
			if len(log.GetEntries()) != 5 || log.GetFirstSeq() != 1 || log.GetLastSeq() != 5 {
				t.Errorf("log %d entries, %d..%d", len(log.GetEntries()), log.GetFirstSeq(), log.GetLastSeq())
			}
		})
	}
}
