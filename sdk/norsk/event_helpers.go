package norsk

import (
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/eventsubject"
)

// EventKind is the kind of an Event: the name of its kind field as the
// proto spells it. Kinds this SDK does not list (added by a newer Manager)
// are still named, by the same rule.
type EventKind string

// The kinds of events.
const (
	EventKindJobSnapshot                    EventKind = "job_snapshot"
	EventKindNodeSnapshot                   EventKind = "node_snapshot"
	EventKindInitialDataComplete            EventKind = "initial_data_complete"
	EventKindJobCreated                     EventKind = "job_created"
	EventKindJobUpdated                     EventKind = "job_updated"
	EventKindJobDeleted                     EventKind = "job_deleted"
	EventKindNodeOnline                     EventKind = "node_online"
	EventKindNodeLost                       EventKind = "node_lost"
	EventKindNodeStopping                   EventKind = "node_stopping"
	EventKindNodeTerminated                 EventKind = "node_terminated"
	EventKindNodeTagsUpdated                EventKind = "node_tags_updated"
	EventKindClusterSlotRegistered          EventKind = "cluster_slot_registered"
	EventKindClusterSlotUpdated             EventKind = "cluster_slot_updated"
	EventKindClusterSlotDeregistered        EventKind = "cluster_slot_deregistered"
	EventKindBundleCreated                  EventKind = "bundle_created"
	EventKindBundleUpdated                  EventKind = "bundle_updated"
	EventKindBundleDeleted                  EventKind = "bundle_deleted"
	EventKindPlacement                      EventKind = "placement"
	EventKindLeaseStatus                    EventKind = "lease_status"
	EventKindMigrationState                 EventKind = "migration_state"
	EventKindMigrationInitialStateDelivered EventKind = "migration_initial_state_delivered"
	EventKindMigrationTargetReady           EventKind = "migration_target_ready"
	EventKindMigrationSourceStoppedOutput   EventKind = "migration_source_stopped_output"
	EventKindMigrationTargetApplied         EventKind = "migration_target_applied"
	EventKindMigrationAborted               EventKind = "migration_aborted"
	EventKindMigrationUpdated               EventKind = "migration_updated"
	EventKindMigrationForgotten             EventKind = "migration_forgotten"
)

// Event is the wire type (an alias of the generated message, so its
// GetXxx accessors work); the functions below are the typed view of it.
// They accept nil and events of any kind, answering the zero value when the
// event does not carry what is asked for.

// EventKinds lists every kind of event the SDK's proto defines, in the
// proto's order (read from its descriptor, so it is never out of date).
func EventKinds() []EventKind {
	oneof := (&managerv1.Event{}).ProtoReflect().Descriptor().Oneofs().ByName("kind")
	kinds := make([]EventKind, oneof.Fields().Len())
	for i := range kinds {
		kinds[i] = EventKind(oneof.Fields().Get(i).Name())
	}
	return kinds
}

// EventKindOf returns ev's kind ("" for nil or an event with no kind set).
func EventKindOf(ev *Event) EventKind { return EventKind(eventsubject.Kind(ev)) }

// EventJob returns the job a job_snapshot, job_created or job_updated event
// carries, as it is after the change; nil for other events.
func EventJob(ev *Event) *JobWithHistory {
	switch k := ev.GetKind().(type) {
	case *managerv1.Event_JobSnapshot:
		return k.JobSnapshot
	case *managerv1.Event_JobCreated:
		return k.JobCreated.GetJob()
	case *managerv1.Event_JobUpdated:
		return k.JobUpdated.GetJob()
	}
	return nil
}

// EventJobID returns the id of the job ev concerns: a job event (deleted
// included), a placement, or a migration (its source job); "" otherwise.
func EventJobID(ev *Event) string { return eventsubject.Of(ev).JobID }

// EventNode returns the node a node_snapshot or node_* event carries; nil
// for other events.
func EventNode(ev *Event) *Node {
	switch k := ev.GetKind().(type) {
	case *managerv1.Event_NodeSnapshot:
		return k.NodeSnapshot
	case *managerv1.Event_NodeOnline:
		return k.NodeOnline.GetNode()
	case *managerv1.Event_NodeLost:
		return k.NodeLost.GetNode()
	case *managerv1.Event_NodeStopping:
		return k.NodeStopping.GetNode()
	case *managerv1.Event_NodeTerminated:
		return k.NodeTerminated.GetNode()
	case *managerv1.Event_NodeTagsUpdated:
		return k.NodeTagsUpdated.GetNode()
	}
	return nil
}

// EventNodeIDs returns the nodes ev concerns: a node or cluster-slot
// event's node, the nodes of a job event's instances, a placement's node
// (and the node it replaced), a migration's source and target.
func EventNodeIDs(ev *Event) []string { return eventsubject.Of(ev).NodeIDs }

// EventMigration returns the migration record a migration_updated event
// carries; nil for other events (the handshake events, migration_state to
// migration_aborted, carry a MigrationEvent: see EventMigrationStep).
func EventMigration(ev *Event) *MigrationState { return ev.GetMigrationUpdated() }

// EventMigrationStep returns the handshake step a migration_state,
// migration_initial_state_delivered, migration_target_ready,
// migration_source_stopped_output, migration_target_applied or
// migration_aborted event carries; nil for other events.
func EventMigrationStep(ev *Event) *MigrationEvent {
	switch k := ev.GetKind().(type) {
	case *managerv1.Event_MigrationState:
		return k.MigrationState
	case *managerv1.Event_MigrationInitialStateDelivered:
		return k.MigrationInitialStateDelivered
	case *managerv1.Event_MigrationTargetReady:
		return k.MigrationTargetReady
	case *managerv1.Event_MigrationSourceStoppedOutput:
		return k.MigrationSourceStoppedOutput
	case *managerv1.Event_MigrationTargetApplied:
		return k.MigrationTargetApplied
	case *managerv1.Event_MigrationAborted:
		return k.MigrationAborted
	}
	return nil
}

// EventMigrationID returns the id of the migration ev concerns: a
// migration event's, or that of a migrating instance of a job event; ""
// otherwise.
func EventMigrationID(ev *Event) string { return eventsubject.Of(ev).MigrationID }

// EventBundle returns the bundle a bundle_created or bundle_updated event
// carries; nil for other events.
func EventBundle(ev *Event) *Bundle {
	switch k := ev.GetKind().(type) {
	case *managerv1.Event_BundleCreated:
		return k.BundleCreated.GetBundle()
	case *managerv1.Event_BundleUpdated:
		return k.BundleUpdated.GetBundle()
	}
	return nil
}

// EventBundleID returns the id of the bundle ev concerns: a bundle event's
// (deleted included), or the bundle of a bundle's job; "" otherwise.
func EventBundleID(ev *Event) string { return eventsubject.Of(ev).BundleID }
