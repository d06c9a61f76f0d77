package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// Tables of the state store.
const (
	tableJobs       = "jobs"
	tableInstances  = "instances"
	tableNodes      = "nodes"
	tableMeta       = "meta"
	tableAudit      = "audit"
	tableKV         = "kv"
	tableKVNS       = "kvns"
	tableSingletons = "singletons"
	tableTokens     = "tokens"
	tableMembers    = "members"
	tableBundles    = "bundles"
	tableMigrations = "migrations"
	tableHostAgents = "host_agents"
)

// singleton is a row of the singletons table: one message per name (the
// audit chain's state, the store's own meta).
type singleton struct {
	Key string
	Msg proto.Message
}

// Singleton names.
const (
	singletonAudit     = "audit"
	singletonStore     = "store"
	singletonDiscovery = "discovery"
	singletonAccess    = "access-replica"
	singletonCluster   = "cluster"
	singletonLeases    = "leases"
)

// KVID is the primary key of a KV entry: namespace and key.
func KVID(namespace, key string) string { return namespace + "\x00" + key }

// metaRow is a row of the meta table (the last applied index and such).
type metaRow struct {
	Key   string
	Value uint64
}

// InstanceID is the primary key of an instance: job id and role.
func InstanceID(jobID, role string) string { return jobID + "\x00" + role }

// instancesByJob is the index a reader of a job's instances watches
// (Read.InstancesOfJob). It is not stored: the instances' primary key,
// InstanceID, begins with the job id, so the id index answers the read by
// prefix, and a stored copy only cost every bind a third radix insert
// (decision 0047, 2026-12-04 afternoon).
const instancesByJob = "job"

// watchSchema is schema() plus the indexes that exist only to be watched
// (watch.go): the keys a commit wakes readers by.
func watchSchema() *memdb.DBSchema {
	sch := schema()
	sch.Tables[tableInstances].Indexes[instancesByJob] = &memdb.IndexSchema{Name: instancesByJob, Indexer: strIndex(func(o any) string {
		return o.(*managerv1.Instance).GetJobId()
	})}
	return sch
}

func schema() *memdb.DBSchema {
	return &memdb.DBSchema{
		Tables: map[string]*memdb.TableSchema{
			tableJobs: {
				Name: tableJobs,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: strIndex(func(o any) string {
						return o.(*storev1.JobRecord).GetJob().GetJobId()
					})},
				},
			},
			tableInstances: {
				Name: tableInstances,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: strIndex(func(o any) string {
						i := o.(*managerv1.Instance)
						return InstanceID(i.GetJobId(), i.GetRole())
					})},
					"node": {Name: "node", Indexer: strIndex(func(o any) string {
						return o.(*managerv1.Instance).GetNodeId()
					})},
				},
			},
			tableNodes: {
				Name: tableNodes,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: strIndex(func(o any) string {
						return o.(*storev1.NodeRecord).GetNode().GetNodeId()
					})},
					"name": {Name: "name", Unique: true, Indexer: strIndex(func(o any) string {
						return o.(*storev1.NodeRecord).GetNode().GetNodeName()
					})},
					"token": {Name: "token", Unique: true, AllowMissing: true, Indexer: strIndex(func(o any) string {
						return o.(*storev1.NodeRecord).GetToken()
					})},
					"secret": {Name: "secret", Unique: true, AllowMissing: true, Indexer: strIndex(func(o any) string {
						return o.(*storev1.NodeRecord).GetNodeSecret()
					})},
				},
			},
			tableMeta: {
				Name: tableMeta,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Key"}},
				},
			},
			tableSingletons: {
				Name: tableSingletons,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Key"}},
				},
			},
			tableAudit: {
				Name: tableAudit,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: seqIndex{}},
				},
			},
			tableKV: {
				Name: tableKV,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: strIndex(func(o any) string {
						r := o.(*storev1.KvRecord)
						return KVID(r.GetNamespace(), r.GetEntry().GetKey())
					})},
				},
			},
			tableTokens: {
				Name: tableTokens,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: strIndex(func(o any) string {
						return o.(*storev1.TokenRecord).GetToken().GetId()
					})},
				},
			},
			tableHostAgents: {
				Name: tableHostAgents,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: strIndex(func(o any) string {
						return o.(*storev1.HostAgentRecord).GetName()
					})},
				},
			},
			tableMembers: {
				Name: tableMembers,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: strIndex(func(o any) string {
						return o.(*storev1.MemberRecord).GetName()
					})},
				},
			},
			tableBundles: {
				Name: tableBundles,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: strIndex(func(o any) string {
						return o.(*managerv1.Bundle).GetBundleId()
					})},
				},
			},
			tableMigrations: {
				Name: tableMigrations,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: strIndex(func(o any) string {
						return o.(*managerv1.MigrationState).GetMigrationId()
					})},
					"job": {Name: "job", AllowMissing: true, Indexer: strIndex(func(o any) string {
						return o.(*managerv1.MigrationState).GetSourceJobId()
					})},
				},
			},
			tableKVNS: {
				Name: tableKVNS,
				Indexes: map[string]*memdb.IndexSchema{
					"id": {Name: "id", Unique: true, Indexer: strIndex(func(o any) string {
						return o.(*storev1.KvNamespace).GetName()
					})},
				},
			},
		},
	}
}

// strIndex indexes a string computed from the object; an empty string is a
// missing value. Keys are NUL-terminated like memdb's StringFieldIndex, so
// prefix queries work with the "_prefix" suffix.
type strIndex func(o any) string

func (f strIndex) FromObject(o any) (bool, []byte, error) {
	v := f(o)
	if v == "" {
		return false, nil, nil
	}
	return true, append([]byte(v), 0), nil
}

func (f strIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("index takes one argument, got %d", len(args))
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("index argument must be a string, got %T", args[0])
	}
	return append([]byte(s), 0), nil
}

func (f strIndex) PrefixFromArgs(args ...any) ([]byte, error) {
	b, err := f.FromArgs(args...)
	if err != nil {
		return nil, err
	}
	return b[:len(b)-1], nil
}

// seqIndex indexes audit entries by seq (seqKey), so that iteration is in
// seq order.
type seqIndex struct{}

// seqKey is seq's index key: its 16 hexadecimal digits, most significant
// first, one byte (0–15) each. Every entry appended copies the radix
// tree's nodes on its path; with a byte of the seq per level those nodes
// fill to 256 children, and copying them was 9 KiB of garbage per audited
// call. A digit per level keeps each node to 16 children, for a path a few
// levels longer (decision 0058, "CPU per call").
func seqKey(seq uint64) []byte {
	var b [16]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte(seq & 0xf)
		seq >>= 4
	}
	return b[:]
}

func (seqIndex) FromObject(o any) (bool, []byte, error) {
	return true, seqKey(uint64(o.(*managerv1.AuditLogEntry).GetSeq())), nil
}

func (seqIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("seq index takes one argument, got %d", len(args))
	}
	seq, ok := args[0].(int64)
	if !ok {
		return nil, fmt.Errorf("seq index argument must be an int64, got %T", args[0])
	}
	return seqKey(uint64(seq)), nil
}
