package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/snapshotfile"
)

// Backup reasons.
const (
	BackupScheduled  = "scheduled"
	BackupPreUpgrade = "pre-upgrade"
	BackupManual     = "manual"
)

// BackupExt is the extension of backup files.
const BackupExt = ".nsnap"

// BackupInfo describes one backup file.
type BackupInfo struct {
	Path          string
	Index         uint64
	SchemaVersion uint32
	CreatedAt     time.Time
	Bytes         int64
	Reason        string
}

// backupName is "<reason>-<UTC time>-<index>.nsnap": sortable by time, and
// naming what it is.
func backupName(reason string, at time.Time, index uint64) string {
	return fmt.Sprintf("%s-%s-%d%s", reason, at.UTC().Format("20060102T150405.000Z"), index, BackupExt)
}

func parseBackupName(name string) (reason string, at time.Time, index uint64, ok bool) {
	base := strings.TrimSuffix(name, BackupExt)
	if base == name {
		return "", time.Time{}, 0, false
	}
	i := strings.LastIndexByte(base, '-')
	if i < 0 {
		return "", time.Time{}, 0, false
	}
	idx, err := strconv.ParseUint(base[i+1:], 10, 64)
	if err != nil {
		return "", time.Time{}, 0, false
	}
	rest := base[:i]
	j := strings.LastIndexByte(rest, '-')
	if j < 0 {
		return "", time.Time{}, 0, false
	}
	t, err := time.Parse("20060102T150405.000Z", rest[j+1:])
	if err != nil {
		return "", time.Time{}, 0, false
	}
	return rest[:j], t, idx, true
}

// WriteSnapshotFile writes a consistent snapshot of r to path, atomically
// (a temporary file, fsync, rename, fsync of the directory). It returns the
// bytes written.
func WriteSnapshotFile(path string, r *state.Read) (int64, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	var n int64
	err := atomicfile.Write(path, 0o600, func(w io.Writer) error {
		var err error
		n, err = r.WriteTo(w)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("write snapshot: %w", err)
	}
	return n, nil
}

// Backup writes a backup of the current state into dir.
func (s *Store) Backup(dir, reason string, now time.Time) (BackupInfo, error) {
	r := s.State().Snapshot()
	path := filepath.Join(dir, backupName(reason, now, r.Index()))
	n, err := WriteSnapshotFile(path, r)
	if err != nil {
		return BackupInfo{}, err
	}
	s.logger.Info("backup written", "path", path, "reason", reason, "index", r.Index(), "bytes", n)
	v := r.SchemaVersion()
	if v == 0 {
		v = state.SchemaVersion
	}
	return BackupInfo{Path: path, Index: r.Index(), SchemaVersion: v, CreatedAt: now, Bytes: n, Reason: reason}, nil
}

// ListBackups lists the backups in dir, newest first. Files that are not
// backups are ignored; a backup is not opened (see ValidateSnapshotFile).
func ListBackups(dir string) ([]BackupInfo, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []BackupInfo
	for _, e := range entries {
		reason, at, index, ok := parseBackupName(e.Name())
		if !ok || e.IsDir() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, BackupInfo{Path: filepath.Join(dir, e.Name()), Index: index, CreatedAt: at, Bytes: info.Size(), Reason: reason})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].Index > out[j].Index
	})
	return out, nil
}

// PruneBackups keeps the newest keep scheduled backups in dir and removes
// the older ones. Backups taken for another reason (pre-upgrade, manual) are
// an operator's to remove.
func PruneBackups(dir string, keep int) error {
	all, err := ListBackups(dir)
	if err != nil {
		return err
	}
	kept := 0
	for _, b := range all {
		if b.Reason != BackupScheduled {
			continue
		}
		kept++
		if kept > keep {
			if err := os.Remove(b.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// ValidateSnapshotFile reads a whole snapshot file into a scratch state and
// returns its header. A file that is not a snapshot is INVALID_ARGUMENT, one
// that fails its checksum DATA_LOSS, one from a newer binary
// FAILED_PRECONDITION.
func ValidateSnapshotFile(path string) (*storev1.SnapshotHeader, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, apierr.Invalid("file", "%v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, apierr.Invalid("file", "%v", err)
	}
	h, err := state.New(state.Limits{}).Restore(f)
	if err != nil {
		return nil, 0, snapshotError(path, err)
	}
	return h, fi.Size(), nil
}

// snapshotError classifies a snapshot that cannot be restored.
func snapshotError(path string, err error) error {
	switch {
	case errors.Is(err, snapshotfile.ErrChecksum):
		return apierr.New(apierr.DataLoss, "snapshot %s fails its checksum (damaged or altered): %v", path, err)
	case errors.Is(err, state.ErrCorruptSnapshot):
		return apierr.Invalid("file", "%s is not a readable snapshot: %v", path, err)
	}
	return apierr.FailedPreconditionf("snapshot %s: %v", path, err)
}

// RestoreSnapshotFile replaces the whole state with a snapshot file's. The
// file is checked in full first (raft cannot undo a restore that fails half
// way). The restored state keeps its own schema version; the Manager
// migrates it at its next boot.
func (s *Store) RestoreSnapshotFile(ctx context.Context, path string) (*storev1.SnapshotHeader, error) {
	h, size, err := ValidateSnapshotFile(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	timeout := s.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: h.GetIndex(), Size: size}
	if err := s.raft.Restore(meta, io.Reader(f), timeout); err != nil {
		return nil, fmt.Errorf("restore %s: %w", path, err)
	}
	s.logger.Info("state restored from a snapshot file", "path", path, "index", h.GetIndex(), "schema_version", h.GetSchemaVersion())
	return h, nil
}

// SnapshotFileHeader reads only the header of a snapshot file.
func SnapshotFileHeader(path string) (*storev1.SnapshotHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := snapshotfile.NewReader(f)
	if _, err := r.Next(); err != nil && r.Header() == nil {
		return nil, err
	}
	if r.Header() == nil {
		return nil, fmt.Errorf("%s: no header", path)
	}
	return r.Header(), nil
}
