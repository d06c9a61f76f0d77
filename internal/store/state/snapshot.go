package state

import (
	"errors"
	"fmt"
	"io"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/snapshotfile"
)

// WriteTo writes every row of the view as a snapshot (pkg/snapshotfile): a
// header, the store's meta, the audit chain's state and entries, the KV
// namespaces and keys, the nodes, jobs and instances, then the trailer.
func (r *Read) WriteTo(w io.Writer) (int64, error) {
	sw := snapshotfile.NewWriter(w)
	put := func(rec *storev1.SnapshotRecord) error { return sw.Put(rec) }
	// The header names the version of the data (a state not yet migrated
	// is written as what it is, so the binary it came from can read it back).
	version := r.SchemaVersion()
	if version == 0 {
		version = SchemaVersion
	}
	if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Header{Header: &storev1.SnapshotHeader{
		SchemaVersion: version, Index: r.Index(),
	}}}); err != nil {
		return 0, err
	}
	if raw, err := r.txn.First(tableSingletons, "id", singletonStore); err == nil && raw != nil {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_StoreMeta{StoreMeta: raw.(*singleton).Msg.(*storev1.StoreMeta)}}); err != nil {
			return 0, err
		}
	}
	if raw, err := r.txn.First(tableSingletons, "id", singletonAudit); err == nil && raw != nil {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_AuditState{AuditState: raw.(*singleton).Msg.(*storev1.AuditState)}}); err != nil {
			return 0, err
		}
	}
	for _, e := range r.AuditChainOldestFirst() {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_AuditEntry{AuditEntry: e}}); err != nil {
			return 0, err
		}
	}
	for _, ns := range r.kvNamespaces() {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_KvNamespace{KvNamespace: ns}}); err != nil {
			return 0, err
		}
	}
	var err error
	it := r.iter(nil, tableKV, "id_prefix", "")
	for raw := it.Next(); raw != nil && err == nil; raw = it.Next() {
		err = put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Kv{Kv: raw.(*storev1.KvRecord)}})
	}
	if err != nil {
		return 0, err
	}
	if raw, err := r.txn.First(tableSingletons, "id", singletonCluster); err == nil && raw != nil {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_ClusterMeta{ClusterMeta: raw.(*singleton).Msg.(*storev1.ClusterMeta)}}); err != nil {
			return 0, err
		}
	}
	for _, m := range r.Members() {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Member{Member: m}}); err != nil {
			return 0, err
		}
	}
	for _, b := range r.Bundles(nil) {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Bundle{Bundle: b}}); err != nil {
			return 0, err
		}
	}
	for _, h := range r.HostAgents() {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_HostAgent{HostAgent: h}}); err != nil {
			return 0, err
		}
	}
	for _, m := range r.Migrations(nil, "") {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Migration{Migration: m}}); err != nil {
			return 0, err
		}
	}
	if raw, err := r.txn.First(tableSingletons, "id", singletonLeases); err == nil && raw != nil {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_LeaseState{LeaseState: raw.(*singleton).Msg.(*storev1.LeaseState)}}); err != nil {
			return 0, err
		}
	}
	for _, tok := range r.Tokens() {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Token{Token: tok}}); err != nil {
			return 0, err
		}
	}
	if f := r.DiscoveryFleet(); f != nil {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Discovery{Discovery: f}}); err != nil {
			return 0, err
		}
	}
	if a := r.AccessReplica(); a != nil {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_AccessReplica{AccessReplica: a}}); err != nil {
			return 0, err
		}
	}
	for _, node := range r.Nodes(nil) {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Node{Node: node}}); err != nil {
			return 0, err
		}
	}
	r.Jobs(nil, "", func(j *storev1.JobRecord) bool {
		err = put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Job{Job: j}})
		return err == nil
	})
	if err != nil {
		return 0, err
	}
	r.Instances(nil, func(in *managerv1.Instance) bool {
		err = put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Instance{Instance: in}})
		return err == nil
	})
	if err != nil {
		return 0, err
	}
	return sw.Close()
}

// ErrCorruptSnapshot is returned for a snapshot that cannot be decoded or
// fails its checksum (the error also wraps snapshotfile.ErrCorrupt or
// snapshotfile.ErrChecksum).
var ErrCorruptSnapshot = errors.New("corrupt snapshot")

// Restore replaces the whole state with a snapshot's rows. Watchers of the
// old state are woken (AbandonCh) so they read again. A snapshot of an older
// schema version is read as it is (a version-1 snapshot has no store meta:
// SchemaVersion infers 1 from its data, for MigrateSchema to move on); a
// newer one is refused. On error the state is unchanged.
func (s *State) Restore(rd io.Reader) (*storev1.SnapshotHeader, error) {
	g := newGeneration()
	txn := g.db.Txn(true)
	sr := snapshotfile.NewReader(rd)
	for i := 1; ; i++ {
		rec, err := sr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorruptSnapshot, err)
		}
		if i == 1 {
			if v := sr.Header().GetSchemaVersion(); v > SchemaVersion {
				return nil, fmt.Errorf("snapshot schema version %d is newer than this binary's %d; upgrade the Manager", v, SchemaVersion)
			}
		}
		switch x := rec.GetRecord().(type) {
		case *storev1.SnapshotRecord_Node:
			err = txn.Insert(tableNodes, x.Node)
		case *storev1.SnapshotRecord_Job:
			err = txn.Insert(tableJobs, x.Job)
		case *storev1.SnapshotRecord_Instance:
			err = txn.Insert(tableInstances, x.Instance)
		case *storev1.SnapshotRecord_AuditEntry:
			err = txn.Insert(tableAudit, x.AuditEntry)
		case *storev1.SnapshotRecord_AuditState:
			err = txn.Insert(tableSingletons, &singleton{Key: singletonAudit, Msg: x.AuditState})
		case *storev1.SnapshotRecord_Kv:
			err = txn.Insert(tableKV, x.Kv)
		case *storev1.SnapshotRecord_KvNamespace:
			err = txn.Insert(tableKVNS, x.KvNamespace)
		case *storev1.SnapshotRecord_Member:
			err = txn.Insert(tableMembers, x.Member)
		case *storev1.SnapshotRecord_ClusterMeta:
			err = txn.Insert(tableSingletons, &singleton{Key: singletonCluster, Msg: x.ClusterMeta})
		case *storev1.SnapshotRecord_Bundle:
			err = txn.Insert(tableBundles, x.Bundle)
		case *storev1.SnapshotRecord_Migration:
			err = txn.Insert(tableMigrations, x.Migration)
		case *storev1.SnapshotRecord_LeaseState:
			err = txn.Insert(tableSingletons, &singleton{Key: singletonLeases, Msg: x.LeaseState})
		case *storev1.SnapshotRecord_Token:
			err = txn.Insert(tableTokens, x.Token)
		case *storev1.SnapshotRecord_HostAgent:
			err = txn.Insert(tableHostAgents, x.HostAgent)
		case *storev1.SnapshotRecord_Discovery:
			err = txn.Insert(tableSingletons, &singleton{Key: singletonDiscovery, Msg: x.Discovery})
		case *storev1.SnapshotRecord_AccessReplica:
			err = txn.Insert(tableSingletons, &singleton{Key: singletonAccess, Msg: x.AccessReplica})
		case *storev1.SnapshotRecord_StoreMeta:
			err = txn.Insert(tableSingletons, &singleton{Key: singletonStore, Msg: x.StoreMeta})
		default:
			// A record type from a newer binary within the same schema
			// version is skippable by design.
		}
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorruptSnapshot, i, err)
		}
	}
	header := sr.Header()
	if v := header.GetSchemaVersion(); v > SchemaVersion {
		return nil, fmt.Errorf("snapshot schema version %d is newer than this binary's %d; upgrade the Manager", v, SchemaVersion)
	}
	if err := txn.Insert(tableMeta, &metaRow{Key: "index", Value: header.GetIndex()}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
	}
	txn.Commit()
	g.counts = recount(&Read{txn: g.db.Txn(false), abandon: g.abandon})
	g.watches = newWatches(watchSchema(), header.GetIndex())
	old := s.cur.Swap(g)
	old.watches.stop()
	close(old.abandon)
	return header, nil
}
