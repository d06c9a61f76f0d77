package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/store"
)

// storeConfig is the store's configuration for this open.
func (m *Member) storeConfig(join bool) store.Config {
	sc := m.cfg.Store
	sc.Broker = m.newBroker()
	sc.Join = join
	if !m.Clustered() {
		sc.RaftBind, sc.RaftAdvertise, sc.StreamLayer, sc.RaftTLS = "", "", nil, nil
		return sc
	}
	sc.Bootstrap = nil
	for _, n := range m.cfg.Nodes {
		sc.Bootstrap = append(sc.Bootstrap, store.Voter(n.Name, n.Raft))
	}
	return sc
}

// newBroker is a store's event broker, sized by the member's Events.
func (m *Member) newBroker() *events.Broker {
	cfg := m.cfg.Events
	if cfg.Clock == nil {
		cfg.Clock = m.cfg.Clock
	}
	return events.NewBroker(cfg)
}

// Open opens the member's store for this boot: discarding it first when
// LeaveQuorum asked for that, restoring (standalone) or rejoining (in a
// cluster) when it cannot be read.
func (m *Member) Open(ctx context.Context) error {
	join := m.Clustered() && m.cfg.State == StateExisting
	if _, err := os.Stat(filepath.Join(m.cfg.DataDir, joinMarker)); err == nil {
		join = true
	}
	if _, err := os.Stat(filepath.Join(m.cfg.DataDir, leaveMarker)); err == nil {
		moved, err := m.discardStore()
		if err != nil {
			return err
		}
		m.events.Record("leave-quorum", fmt.Sprintf("discarded this member's copy (moved to %s); rejoining as a follower", moved), 0, 0)
		join = true
	}
	var st *store.Store
	var err error
	if m.Clustered() {
		st, err = store.Open(ctx, m.storeConfig(join))
		if err != nil && ctx.Err() == nil && errors.Is(err, store.ErrUnreadable) {
			// A cluster member's state comes from its peers: an
			// unreadable copy is put aside and the member rejoins. (An
			// error of the environment — a port in use, a full disk —
			// discards nothing.)
			moved, derr := m.discardStore()
			if derr != nil {
				return fmt.Errorf("%w; and it cannot be moved aside: %v", err, derr)
			}
			m.log.Error("the store cannot be read; rejoining the cluster with an empty copy", "err", err, "moved_to", moved)
			m.events.Record("rejoined", "the store could not be read ("+err.Error()+"); moved to "+moved+", rejoining", 0, 0)
			m.cfg.Boot.RestoreReason = err.Error()
			m.cfg.Boot.UnreadableStoreMovedTo = moved
			st, err = store.Open(ctx, m.storeConfig(true))
		}
	} else {
		st, err = m.openStandalone(ctx)
	}
	if err != nil {
		return err
	}
	m.storeRef.Store(st)
	return nil
}

// discardStore moves the raft store aside (never deleting it), marks the
// member as rejoining and removes the leave marker.
func (m *Member) discardStore() (string, error) {
	now := m.cfg.Clock.Now().UTC()
	if err := atomicfile.WriteFile(filepath.Join(m.cfg.DataDir, joinMarker), []byte("rejoining since "+now.Format(time.RFC3339)+"\n"), 0o600); err != nil {
		return "", err
	}
	dir := m.cfg.Store.Dir
	moved := dir + ".discarded-" + now.Format("20060102T150405.000000000Z")
	if _, err := os.Stat(dir); err == nil {
		if err := os.Rename(dir, moved); err != nil {
			return "", fmt.Errorf("move %s aside: %w", dir, err)
		}
	} else {
		moved = ""
	}
	if err := os.Remove(filepath.Join(m.cfg.DataDir, leaveMarker)); err != nil && !os.IsNotExist(err) {
		return moved, err
	}
	return moved, nil
}

// openStandalone opens a standalone member's store; when it cannot be
// read, it moves it aside and restores the newest backup that verifies,
// saying so in the boot report.
func (m *Member) openStandalone(ctx context.Context) (*store.Store, error) {
	scfg := m.storeConfig(false)
	st, openErr := store.Open(ctx, scfg)
	if openErr == nil {
		return st, nil
	}
	if ctx.Err() != nil || !errors.Is(openErr, store.ErrUnreadable) {
		// Not the store's content (a permission, a full disk, …): never
		// discard it for that; the operator fixes the cause and restarts.
		return nil, openErr
	}
	log := scfg.Logger.With("component", "store")
	backups, err := store.ListBackups(m.cfg.BackupDir)
	if err != nil {
		return nil, fmt.Errorf("%w; and the backups cannot be listed: %v", openErr, err)
	}
	var chosen *store.BackupInfo
	for i := range backups {
		if _, _, err := store.ValidateSnapshotFile(backups[i].Path); err != nil {
			log.Warn("backup does not verify; trying an older one", "backup", backups[i].Path, "err", err)
			continue
		}
		chosen = &backups[i]
		break
	}
	if chosen == nil {
		return nil, fmt.Errorf("%w; and there is no backup in %s to restore from", openErr, m.cfg.BackupDir)
	}
	moved := scfg.Dir + ".unreadable-" + m.cfg.Clock.Now().UTC().Format("20060102T150405.000000000Z")
	log.Error("the store cannot be read; restoring the newest backup", "err", openErr, "backup", chosen.Path, "moved_to", moved)
	if err := os.Rename(scfg.Dir, moved); err != nil {
		return nil, fmt.Errorf("%w; and it cannot be moved aside: %v", openErr, err)
	}
	// The failed attempt closed its event broker; the fresh store gets its
	// own.
	scfg.Broker = m.newBroker()
	st, err = store.Open(ctx, scfg)
	if err != nil {
		return nil, fmt.Errorf("open a fresh store to restore into: %w", err)
	}
	if _, err := st.RestoreSnapshotFile(ctx, chosen.Path); err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("restore %s: %w", chosen.Path, err)
	}
	report := m.cfg.Boot
	report.RestoredFromBackup = true
	report.RestoredBackup = chosen.Path
	report.RestoreReason = openErr.Error()
	report.UnreadableStoreMovedTo = moved
	return st, nil
}
