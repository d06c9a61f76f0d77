package manager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/protobuf/types/known/timestamppb"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// lockDataDir takes an exclusive, non-blocking lock on the data directory,
// so a second Manager on the same directory is refused at once instead of
// waiting (or corrupting). The lock lasts until the returned lock is
// closed.
func lockDataDir(dir string) (*dataDirLock, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("manager: lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("manager: data dir %s is in use by another process (%v)", dir, err)
	}
	return &dataDirLock{f: f}, nil
}

// dataDirLock is a held lock on a data directory.
type dataDirLock struct{ f *os.File }

// Close releases the lock. It unlocks before closing: a process forked
// meanwhile (another goroutine's exec, between its fork and its exec)
// shares the open file, and a close alone would leave the lock held
// until that child let go of it.
func (l *dataDirLock) Close() error {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	return l.f.Close()
}

// migrate brings the state to this binary's schema version: a new store is
// initialised; an older one is backed up first, then migrated through the
// log (so every member migrates at the same point).
func (s *Server) migrate(ctx context.Context, st *store.Store) error {
	cur := st.State().Snapshot().SchemaVersion()
	if cur >= state.SchemaVersion {
		return nil
	}
	if cur > 0 {
		b, err := st.Backup(s.cfg.BackupDir, store.BackupPreUpgrade, s.cfg.Clock.Now())
		if err != nil {
			return fmt.Errorf("backup before migrating the schema from %d: %w", cur, err)
		}
		s.boot.PreUpgradeBackup = b.Path
	}
	cmd := &storev1.Command{
		Time: timestamppb.New(s.cfg.Clock.Now()),
		Cmd:  &storev1.Command_MigrateSchema{MigrateSchema: &storev1.MigrateSchema{From: cur, To: state.SchemaVersion}},
	}
	if _, err := st.Apply(ctx, cmd); err != nil {
		return fmt.Errorf("migrate the schema from %d to %d: %w", cur, state.SchemaVersion, err)
	}
	if cur > 0 {
		s.boot.Migrated = true
		s.boot.MigratedFrom = cur
		s.boot.MigratedTo = state.SchemaVersion
		s.log.Info("store schema migrated", "from", cur, "to", state.SchemaVersion, "pre_upgrade_backup", s.boot.PreUpgradeBackup)
	}
	return nil
}

// auditCheck is this member's verdict on the audit chain at boot.
type auditCheck struct {
	mu     sync.Mutex
	ok     bool
	detail string
}

// verifyAuditChain checks the whole chain once, at boot (once the member is
// caught up).
func (s *Server) verifyAuditChain(st *store.Store) {
	err := st.State().Snapshot().VerifyAuditChain()
	s.audit.mu.Lock()
	defer s.audit.mu.Unlock()
	if err != nil {
		s.audit.ok, s.audit.detail = false, err.Error()
		s.log.Error("the audit chain does not verify", "err", err)
		return
	}
	s.audit.ok, s.audit.detail = true, ""
}

func (s *Server) auditVerdict() (bool, string) {
	s.audit.mu.Lock()
	defer s.audit.mu.Unlock()
	return s.audit.ok, s.audit.detail
}

// runBackups writes a scheduled backup every BackupInterval (when the state
// has changed since the last one) and keeps BackupRetain of them.
func (s *Server) runBackups(ctx context.Context, st *store.Store) {
	if s.cfg.BackupInterval < 0 {
		return
	}
	var last uint64
	for {
		t := s.cfg.Clock.NewTimer(s.cfg.BackupInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		idx := st.State().Snapshot().Index()
		if idx == last {
			continue
		}
		now := s.cfg.Clock.Now()
		_, err := st.Backup(s.cfg.BackupDir, store.BackupScheduled, now)
		s.backups.result(err, now)
		if err != nil {
			s.log.Error("scheduled backup failed", "err", err)
			continue
		}
		last = idx
		if err := store.PruneBackups(s.cfg.BackupDir, s.cfg.BackupRetain); err != nil {
			s.log.Warn("pruning old backups failed", "err", err)
		}
	}
}

// memberNameFile records which member a data directory belongs to.
const memberNameFile = "MEMBER"

// checkMemberName makes sure the data directory is this member's: the raft
// state in it is keyed by the member's name, so opening it under another
// name would strand it. A new directory is claimed.
func checkMemberName(dir, name string) error {
	path := filepath.Join(dir, memberNameFile)
	b, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err):
		return os.WriteFile(path, []byte(name+"\n"), 0o600)
	case err != nil:
		return fmt.Errorf("manager: %w", err)
	}
	if have := strings.TrimSpace(string(b)); have != name {
		return fmt.Errorf("manager: data dir %s belongs to member %q, not %q (give --node-name %s)", dir, have, name, have)
	}
	return nil
}

// MemberName returns the member a data directory belongs to ("" if none
// has claimed it).
func MemberName(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, memberNameFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// RestoreOffline restores a snapshot file into the data directory of a
// stopped (or new) member: the directory's whole state becomes the
// snapshot's. The member migrates it at its next start if it is older.
func RestoreOffline(ctx context.Context, cfg Config, path string) (*storev1.SnapshotHeader, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if n := MemberName(cfg.DataDir); n != "" {
		cfg.NodeName = n
	}
	// An existing directory must not be in use; a new one is only made once
	// the file is known to restore. Either way a file that will not restore
	// leaves the directory as it was.
	var lock *dataDirLock
	if _, err := os.Stat(cfg.DataDir); err == nil {
		if lock, err = lockDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
		defer lock.Close()
	}
	if _, _, err := store.ValidateSnapshotFile(path); err != nil {
		return nil, err
	}
	if lock == nil {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, err
		}
		var err error
		if lock, err = lockDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
		defer lock.Close()
	}
	if err := checkMemberName(cfg.DataDir, cfg.NodeName); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, store.Config{Dir: filepath.Join(cfg.DataDir, "raft"), MemberID: cfg.NodeName, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	h, err := st.RestoreSnapshotFile(ctx, path)
	if cerr := st.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return h, err
}
