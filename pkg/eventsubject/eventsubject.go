// Package eventsubject names what a Manager event is about: its kind (the
// name of the Event's kind oneof field, "job_created") and the job, nodes,
// bundle and migration it concerns. The Go SDK's typed helpers and the
// Manager's server-side event filters both read events through it, so a
// filter and a client agree on what an event is about.
package eventsubject

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// Kind is the name of the set field of ev's kind oneof, as the proto spells
// it ("job_created", "migration_updated"), or "" when none is set. Kinds
// added to the proto later are named without a change here.
func Kind(ev *managerv1.Event) string {
	if ev == nil {
		return ""
	}
	m := ev.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind"))
	if fd == nil {
		return ""
	}
	return string(fd.Name())
}

// Subject is what an event is about. Fields an event does not carry are
// empty.
type Subject struct {
	// JobID is the job the event concerns (a job, placement or migration
	// event; for a migration, the source job).
	JobID string
	// NodeIDs are the nodes it concerns: the node of a node or slot event,
	// the nodes of a job's instances, a placement's node (and the node it
	// replaced), a migration's source and target. No duplicates, in the
	// order found.
	NodeIDs []string
	// BundleID is the bundle of a bundle event or of a bundle's job.
	BundleID string
	// MigrationID is the migration of a migration event, or of the
	// instance of a job event that is migrating.
	MigrationID string
}

// Of returns what ev is about.
func Of(ev *managerv1.Event) Subject {
	var s Subject
	node := func(id string) {
		if id == "" {
			return
		}
		for _, n := range s.NodeIDs {
			if n == id {
				return
			}
		}
		s.NodeIDs = append(s.NodeIDs, id)
	}
	job := func(j *managerv1.JobWithHistory) {
		s.JobID = j.GetJob().GetJobId()
		s.BundleID = j.GetJob().GetTags()[placement.TagBundleID]
		for _, in := range j.GetInstances() {
			node(in.GetNodeId())
			if s.MigrationID == "" {
				s.MigrationID = in.GetMigrationId()
			}
		}
	}
	nodeEv := func(e *managerv1.NodeEvent) { node(e.GetNode().GetNodeId()) }
	migEv := func(e *managerv1.MigrationEvent) {
		s.JobID, s.MigrationID = e.GetJobKey().GetJobId(), e.GetMigrationId()
		node(e.GetNodeId())
	}
	switch k := ev.GetKind().(type) {
	case *managerv1.Event_JobSnapshot:
		job(k.JobSnapshot)
	case *managerv1.Event_NodeSnapshot:
		node(k.NodeSnapshot.GetNodeId())
	case *managerv1.Event_JobCreated:
		job(k.JobCreated.GetJob())
	case *managerv1.Event_JobUpdated:
		job(k.JobUpdated.GetJob())
	case *managerv1.Event_JobDeleted:
		s.JobID = k.JobDeleted.GetJobId()
	case *managerv1.Event_NodeOnline:
		nodeEv(k.NodeOnline)
	case *managerv1.Event_NodeLost:
		nodeEv(k.NodeLost)
	case *managerv1.Event_NodeStopping:
		nodeEv(k.NodeStopping)
	case *managerv1.Event_NodeTerminated:
		nodeEv(k.NodeTerminated)
	case *managerv1.Event_NodeTagsUpdated:
		nodeEv(k.NodeTagsUpdated)
	case *managerv1.Event_ClusterSlotRegistered:
		node(k.ClusterSlotRegistered.GetSlot().GetNodeId())
	case *managerv1.Event_ClusterSlotUpdated:
		node(k.ClusterSlotUpdated.GetSlot().GetNodeId())
	case *managerv1.Event_ClusterSlotDeregistered:
		node(k.ClusterSlotDeregistered.GetSlot().GetNodeId())
	case *managerv1.Event_BundleCreated:
		s.BundleID = k.BundleCreated.GetBundle().GetBundleId()
	case *managerv1.Event_BundleUpdated:
		s.BundleID = k.BundleUpdated.GetBundle().GetBundleId()
	case *managerv1.Event_BundleDeleted:
		s.BundleID = k.BundleDeleted.GetBundleId()
	case *managerv1.Event_Placement:
		s.JobID = k.Placement.GetJobId()
		node(k.Placement.GetNodeId())
		node(k.Placement.GetFailedNodeId())
	case *managerv1.Event_MigrationState:
		migEv(k.MigrationState)
	case *managerv1.Event_MigrationInitialStateDelivered:
		migEv(k.MigrationInitialStateDelivered)
	case *managerv1.Event_MigrationTargetReady:
		migEv(k.MigrationTargetReady)
	case *managerv1.Event_MigrationSourceStoppedOutput:
		migEv(k.MigrationSourceStoppedOutput)
	case *managerv1.Event_MigrationTargetApplied:
		migEv(k.MigrationTargetApplied)
	case *managerv1.Event_MigrationAborted:
		migEv(k.MigrationAborted)
	case *managerv1.Event_MigrationUpdated:
		m := k.MigrationUpdated
		s.JobID, s.MigrationID = m.GetSourceJobId(), m.GetMigrationId()
		node(m.GetSourceNodeId())
		node(m.GetTargetNodeId())
	default:
		// A kind this package does not list (added to the proto later,
		// e.g. by a newer Manager): its message's own job_id, node_id,
		// bundle_id and migration_id fields, when it has them.
		fromFields(ev, &s, node)
	}
	return s
}

// fromFields reads the top-level id fields of ev's kind message.
func fromFields(ev *managerv1.Event, s *Subject, node func(string)) {
	m := ev.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind"))
	if fd == nil || fd.Kind() != protoreflect.MessageKind {
		return
	}
	msg := m.Get(fd).Message()
	str := func(name protoreflect.Name) string {
		f := msg.Descriptor().Fields().ByName(name)
		if f == nil || f.Kind() != protoreflect.StringKind || f.IsList() || f.IsMap() {
			return ""
		}
		return msg.Get(f).String()
	}
	s.JobID, s.BundleID, s.MigrationID = str("job_id"), str("bundle_id"), str("migration_id")
	node(str("node_id"))
}
