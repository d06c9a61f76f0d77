package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
)

// What Open checks before raft starts (decision 0026), so that a store whose
// content was altered is refused with ErrUnreadable, naming what is
// damaged, instead of booting with the alteration or panicking in raft's
// goroutines later:
//
//   - raft's snapshots: raft's file store checks a CRC-64 of state.bin when
//     it opens one, and the state's own format a CRC-32C trailer; raft
//     itself, on a snapshot that fails, silently falls back to an older one
//     and skips one whose meta.json it cannot read. restoreSnapshots
//     restores the newest snapshot that verifies into the FSM itself (raft
//     is started with NoSnapshotRestoreOnStart) and accepts a damaged newer
//     one only when the log still holds every entry it covered; it is then
//     moved aside, so raft starts from the one restored.
//   - the log: checkLog reads every entry raft will replay and verifies the
//     checksum of each command.

// snapshotDamaged is one of raft's snapshots that does not verify.
type snapshotDamaged struct {
	id    string
	index uint64
	err   error
}

// restoreSnapshots restores the newest of raft's snapshots that verifies
// into f and returns its index (0: none, the log replays from its start).
// snapBase is the directory given to raft's file snapshot store.
func restoreSnapshots(snapBase string, snaps *raft.FileSnapshotStore, logs raft.LogStore, f *fsm, logger *slog.Logger) (uint64, error) {
	metas, err := snaps.List()
	if err != nil {
		return 0, fmt.Errorf("list raft snapshots in %s: %w", snapBase, err)
	}
	var damaged []snapshotDamaged
	var base uint64
	restored := ""
	for _, m := range metas {
		_, rc, err := snaps.Open(m.ID)
		if err == nil {
			err = f.Restore(rc)
		}
		if err != nil {
			damaged = append(damaged, snapshotDamaged{id: m.ID, index: m.Index, err: err})
			continue
		}
		base, restored = m.Index, m.ID
		break
	}
	// A snapshot directory raft does not list has a meta.json it cannot
	// read (or of a version it does not know): damaged too, when it is
	// newer than the one restored.
	listed := make(map[string]bool, len(metas))
	for _, m := range metas {
		listed[m.ID] = true
	}
	dirs, err := os.ReadDir(filepath.Join(snapBase, "snapshots"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("read raft snapshots in %s: %w", snapBase, err)
	}
	for _, d := range dirs {
		if !d.IsDir() || listed[d.Name()] || strings.HasSuffix(d.Name(), ".tmp") {
			continue
		}
		// raft names a snapshot term-index-milliseconds.
		parts := strings.Split(d.Name(), "-")
		if len(parts) != 3 {
			continue
		}
		index, err := strconv.ParseUint(parts[1], 10, 64)
		if err != nil || index <= base {
			continue
		}
		damaged = append(damaged, snapshotDamaged{id: d.Name(), index: index, err: errors.New("its meta.json cannot be read")})
	}
	if len(damaged) == 0 {
		return base, nil
	}
	newest := damaged[0]
	for _, d := range damaged {
		if d.index > newest.index {
			newest = d
		}
	}
	first, ferr := logs.FirstIndex()
	last, lerr := logs.LastIndex()
	if ferr != nil || lerr != nil || first == 0 || first > base+1 || last < newest.index {
		return 0, fmt.Errorf("raft snapshot %s (index %d) is damaged (%v), and the raft log (entries %d to %d) no longer holds "+
			"the entries after index %d to rebuild what it held: %w", newest.id, newest.index, newest.err, first, last, base, ErrUnreadable)
	}
	// The log covers everything the damaged snapshots held: rebuild from the
	// older one and the log, and keep the damaged ones out of raft's way.
	aside := filepath.Join(snapBase, "damaged")
	for _, d := range damaged {
		if err := os.MkdirAll(aside, 0o700); err != nil {
			return 0, fmt.Errorf("move damaged raft snapshot %s aside: %w", d.id, err)
		}
		if err := os.Rename(filepath.Join(snapBase, "snapshots", d.id), filepath.Join(aside, d.id)); err != nil {
			return 0, fmt.Errorf("move damaged raft snapshot %s aside: %w", d.id, err)
		}
		logger.Error("a raft snapshot is damaged; the state is rebuilt from an older snapshot and the log, which still holds "+
			"every entry it covered", "snapshot", d.id, "index", d.index, "err", d.err, "moved_to", filepath.Join(aside, d.id),
			"restored_snapshot", restored, "restored_index", base)
	}
	return base, nil
}

// checkLog reads every entry after index base (those raft replays at start)
// and verifies each command's checksum. An entry that cannot be read, that
// fails its checksum, or a gap between base and the log is ErrUnreadable,
// naming the entry.
func checkLog(logs raft.LogStore, base uint64) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("raft log: first index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("raft log: last index: %w", err)
	}
	if last <= base {
		return nil
	}
	if first > base+1 {
		return fmt.Errorf("the raft log starts at entry %d, but the state it follows (a snapshot, or none) ends at index %d: "+
			"entries %d to %d are missing: %w", first, base, base+1, first-1, ErrUnreadable)
	}
	var l raft.Log
	for i := base + 1; i <= last; i++ {
		if err := logs.GetLog(i, &l); err != nil {
			return fmt.Errorf("the raft log entry at index %d cannot be read: %v: %w", i, err, ErrUnreadable)
		}
		if l.Index != i {
			return fmt.Errorf("the raft log entry at index %d reads back as index %d: %w", i, l.Index, ErrUnreadable)
		}
		if l.Type != raft.LogCommand {
			continue
		}
		if _, err := verifyChecksum(&l); err != nil {
			return fmt.Errorf("the raft log is damaged: %v: %w", err, ErrUnreadable)
		}
	}
	return nil
}
