package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Result is what applying one command produced.
type Result struct {
	// Index is the raft index of the command: the revision of what it wrote.
	Index uint64
	// Err is the domain error that refused the command; nothing changed.
	Err error
	// Events are the event-stream events the change raised, in order, each
	// stamped with Index and the command's time.
	Events []*managerv1.Event
	// Value is the command's answer, where it has one (see each command).
	Value any
}

// tx is one command being applied.
type tx struct {
	s      *State
	txn    *memdb.Txn
	index  uint64
	now    *timestamppb.Timestamp
	events []*managerv1.Event
	// pendingViews are job events whose job view is rendered once the
	// command has applied, so every event shows the job as the command left
	// it.
	pendingViews []pendingView
	// delta is what the command changes in the counts, added once it
	// commits.
	delta countDelta
}

type pendingView struct {
	jobID string
	ev    *managerv1.JobEvent
}

// renderViews fills the job views of the command's job events.
func (t *tx) renderViews() {
	r := t.read()
	views := map[string]*managerv1.JobWithHistory{}
	for _, pv := range t.pendingViews {
		v, ok := views[pv.jobID]
		if !ok {
			if rec := r.Job(nil, pv.jobID); rec != nil {
				v = r.JobView(rec, false)
			}
			views[pv.jobID] = v
		}
		pv.ev.Job = v
	}
	t.pendingViews = nil
}

// dropPendingViews removes the job events of a job deleted by the command.
func (t *tx) dropPendingViews(jobID string) {
	drop := map[*managerv1.JobEvent]bool{}
	keep := t.pendingViews[:0]
	for _, pv := range t.pendingViews {
		if pv.jobID == jobID {
			drop[pv.ev] = true
		} else {
			keep = append(keep, pv)
		}
	}
	t.pendingViews = keep
	events := t.events[:0]
	for _, e := range t.events {
		if drop[e.GetJobUpdated()] || drop[e.GetJobCreated()] {
			continue
		}
		events = append(events, e)
	}
	t.events = events
}

// Apply applies one command at the given raft index. A refused command (a
// domain error) changes nothing but the applied index. Apply must be called
// from one goroutine at a time, with strictly increasing indexes.
func (s *State) Apply(index uint64, cmd *storev1.Command) Result {
	g := s.cur.Load()
	t := &tx{s: s, txn: g.db.Txn(true), index: index, now: cmd.GetTime()}
	t.txn.TrackChanges() // what the commit wakes (watch.go)
	if t.now == nil {
		t.now = &timestamppb.Timestamp{}
	}
	value, err := t.dispatch(cmd)
	if err != nil {
		t.txn.Abort()
		t.txn = g.db.Txn(true)
		t.txn.TrackChanges()
		t.events = nil
		t.delta = countDelta{}
	} else {
		t.renderViews()
		if stamp := cmd.GetAudit(); stamp != nil && auditedByStamp(cmd) {
			// The call's audit entry, in the same commit as its change.
			t.auditCall(stamp)
		}
	}
	t.setIndex(index)
	changes := t.txn.Changes()
	t.txn.Commit()
	g.watches.commit(index, changes)
	if err == nil {
		g.counts.add(&t.delta)
	}
	for _, e := range t.events {
		e.Index = index
		e.Timestamp = t.now
	}
	return Result{Index: index, Err: err, Events: t.events, Value: value}
}

// auditedByStamp: a command whose API call leaves the generic audit entry.
// AppendAudit is itself the entry, and PruneAudit leaves its marker.
func auditedByStamp(cmd *storev1.Command) bool {
	switch cmd.GetCmd().(type) {
	case *storev1.Command_AppendAudit, *storev1.Command_PruneAudit:
		return false
	}
	return true
}

// ApplyNoop records that index was applied without a state change (raft's
// own log entries, configuration changes).
func (s *State) ApplyNoop(index uint64) {
	g := s.cur.Load()
	txn := g.db.Txn(true)
	t := &tx{txn: txn}
	t.setIndex(index)
	txn.Commit()
}

func (t *tx) setIndex(index uint64) {
	if err := t.txn.Insert(tableMeta, &metaRow{Key: "index", Value: index}); err != nil {
		panic("state: " + err.Error())
	}
}

func (t *tx) dispatch(cmd *storev1.Command) (any, error) {
	switch c := cmd.GetCmd().(type) {
	case *storev1.Command_CreateJob:
		return nil, t.createJob(c.CreateJob)
	case *storev1.Command_UpdateJob:
		return nil, t.updateJob(c.UpdateJob)
	case *storev1.Command_DeleteJob:
		return nil, t.deleteJob(c.DeleteJob)
	case *storev1.Command_BindInstance:
		return t.bindInstance(c.BindInstance)
	case *storev1.Command_BindInstances:
		return t.bindInstances(c.BindInstances), nil
	case *storev1.Command_PutMigration:
		return t.putMigration(c.PutMigration)
	case *storev1.Command_ForgetMigrations:
		return t.forgetMigrations(c.ForgetMigrations)
	case *storev1.Command_MigrationReports:
		t.migrationReports(c.MigrationReports)
		return nil, nil
	case *storev1.Command_SetNodeDraining:
		return nil, t.setNodeDraining(c.SetNodeDraining)
	case *storev1.Command_StartNodeDrain:
		return nil, t.startNodeDrain(c.StartNodeDrain)
	case *storev1.Command_PutNodeDrain:
		return t.putNodeDrain(c.PutNodeDrain)
	case *storev1.Command_StopInstance:
		return nil, t.stopInstance(c.StopInstance)
	case *storev1.Command_StartPrepared:
		return nil, t.startPrepared(c.StartPrepared)
	case *storev1.Command_CompleteJob:
		return nil, t.completeJob(c.CompleteJob)
	case *storev1.Command_MarkJobFailed:
		return nil, t.markJobFailed(c.MarkJobFailed)
	case *storev1.Command_InstanceReports:
		return t.instanceReports(c.InstanceReports)
	case *storev1.Command_CreateBundle:
		return nil, t.createBundle(c.CreateBundle)
	case *storev1.Command_UpdateBundle:
		return nil, t.updateBundle(c.UpdateBundle)
	case *storev1.Command_DeleteBundle:
		return t.deleteBundle(c.DeleteBundle)
	case *storev1.Command_SetBundleJobDormant:
		return nil, t.setBundleJobDormant(c.SetBundleJobDormant)
	case *storev1.Command_SetBundleStopTime:
		return nil, t.setBundleStopTime(c.SetBundleStopTime)
	case *storev1.Command_RenewBundleLease:
		return nil, t.renewBundleLease(c.RenewBundleLease)
	case *storev1.Command_SetLeasesPaused:
		return nil, t.setLeasesPaused(c.SetLeasesPaused)
	case *storev1.Command_RegisterSlot:
		return nil, t.registerSlot(c.RegisterSlot)
	case *storev1.Command_MemberRegister:
		return t.memberRegister(c.MemberRegister)
	case *storev1.Command_DeregisterSlot:
		return nil, t.deregisterSlot(c.DeregisterSlot)
	case *storev1.Command_SetSlotPool:
		return nil, t.setSlotPool(c.SetSlotPool)
	case *storev1.Command_NodeOnline:
		return t.nodeOnline(c.NodeOnline)
	case *storev1.Command_NodeLost:
		return nil, t.nodeLost(c.NodeLost)
	case *storev1.Command_TerminateNode:
		return nil, t.terminateNode(c.TerminateNode)
	case *storev1.Command_NodeTerminated:
		return nil, t.nodeTerminated(c.NodeTerminated)
	case *storev1.Command_SetNodeTags:
		return nil, t.setNodeTags(c.SetNodeTags)
	case *storev1.Command_SetNodeInstance:
		return nil, t.setNodeInstance(c.SetNodeInstance)
	case *storev1.Command_SetNodeImages:
		return nil, t.setNodeImages(c.SetNodeImages)
	case *storev1.Command_RecordImagesPrefetched:
		return nil, t.recordImagesPrefetched(c.RecordImagesPrefetched)
	case *storev1.Command_SetNodeIdleExpiry:
		return nil, t.setNodeIdleExpiry(c.SetNodeIdleExpiry)
	case *storev1.Command_AppendAudit:
		return t.appendAuditCmd(c.AppendAudit, cmd.GetAudit())
	case *storev1.Command_PruneAudit:
		return t.pruneAudit(c.PruneAudit, cmd.GetAudit())
	case *storev1.Command_KvCommit:
		return t.kvCommit(c.KvCommit)
	case *storev1.Command_MigrateSchema:
		return nil, t.migrateSchema(c.MigrateSchema)
	case *storev1.Command_AddHostAgent:
		return nil, t.addHostAgent(c.AddHostAgent)
	case *storev1.Command_RegisterHostAgent:
		return nil, t.registerHostAgent(c.RegisterHostAgent)
	case *storev1.Command_RemoveHostAgent:
		return nil, t.removeHostAgent(c.RemoveHostAgent)
	case *storev1.Command_CreateToken:
		return nil, t.createToken(c.CreateToken)
	case *storev1.Command_RevokeToken:
		return nil, t.revokeToken(c.RevokeToken)
	case *storev1.Command_PublishDiscovery:
		return t.publishDiscovery(c.PublishDiscovery)
	case *storev1.Command_RotateDiscovery:
		return t.rotateDiscovery(c.RotateDiscovery)
	case *storev1.Command_PublishAccessReplica:
		return t.publishAccessReplica(c.PublishAccessReplica)
	case *storev1.Command_InitCluster:
		return nil, t.initCluster(c.InitCluster)
	case *storev1.Command_ExpectMember:
		return t.expectMember(c.ExpectMember)
	case *storev1.Command_MemberJoined:
		return nil, t.memberJoined(c.MemberJoined)
	case *storev1.Command_MemberRetired:
		return nil, t.memberRetired(c.MemberRetired)
	case *storev1.Command_SetGeneration:
		return nil, t.setGeneration(c.SetGeneration)
	case nil:
		if len(cmd.ProtoReflect().GetUnknown()) > 0 {
			// A command type a newer member wrote. Refusing keeps the
			// state unchanged and every member identical.
			return nil, apierr.New(apierr.FailedPrecondition, "unknown command type (written by a newer Manager version); upgrade this member")
		}
		return nil, apierr.New(apierr.InvalidArgument, "empty command")
	default:
		// A command type this binary does not know: a newer member wrote
		// it. Refusing keeps the state unchanged and deterministic.
		return nil, apierr.New(apierr.FailedPrecondition, "unknown command type %T", c)
	}
}

// read returns a Read over the transaction in progress.
func (t *tx) read() *Read { return &Read{txn: t.txn} }

func (t *tx) insert(table string, obj any) {
	t.count(table, obj, 1)
	if err := t.txn.Insert(table, obj); err != nil {
		panic(fmt.Sprintf("state: insert into %s: %v", table, err))
	}
}

func (t *tx) delete(table string, obj any) {
	t.count(table, obj, -1)
	if err := t.txn.Delete(table, obj); err != nil {
		panic(fmt.Sprintf("state: delete from %s: %v", table, err))
	}
}

// count notes what a write to the counted tables changes (Counts): the row
// it replaces or deletes out, the row it inserts in.
func (t *tx) count(table string, obj any, by int) {
	switch table {
	case tableInstances:
		in := obj.(*managerv1.Instance)
		var prev *managerv1.Instance
		if old, _ := t.txn.First(tableInstances, "id", InstanceID(in.GetJobId(), in.GetRole())); old != nil {
			prev = old.(*managerv1.Instance)
			t.delta.instance(prev, -1)
		}
		if by > 0 {
			t.delta.instance(in, 1)
			t.delta.restarted(prev, in)
		}
	case tableNodes:
		rec := obj.(*storev1.NodeRecord)
		if old, _ := t.txn.First(tableNodes, "id", rec.GetNode().GetNodeId()); old != nil {
			t.delta.node(old.(*storev1.NodeRecord), -1)
		}
		if by > 0 {
			t.delta.node(rec, 1)
		}
	}
}

func (t *tx) emit(e *managerv1.Event) { t.events = append(t.events, e) }
