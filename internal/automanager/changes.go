package automanager

import (
	"context"
	"sync"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Local is what an API inside the Manager's own process adds: the events
// straight from the Manager's event broker, with no network hop and no
// encoding. Run uses it when its API implements it, and the SDK's
// EventStream otherwise.
type Local interface {
	// Subscribe follows the events published after index after (0: from
	// now on). It fails when the events after that index are no longer
	// held; the caller then reads the state afresh and subscribes from now.
	Subscribe(ctx context.Context, after uint64) (Subscription, error)
}

// JobReader is what an API may add for the mirror's reads: a job and its
// instances without its history (which the mirror does not keep, and a
// long-lived job's history is most of its size). Without it the mirror
// reads JobById.
type JobReader interface {
	JobWithoutHistory(ctx context.Context, jobID string) (*managerv1.JobWithHistory, error)
}

// StateReader is what an API inside the Manager's process may add for the
// mirror's reads of one node and of bundle records alone: a node event then
// costs a read of that node, not of the fleet, and a bundle is read without
// the per-job status the API's bundle view renders (which, for a bundle not
// yet placed, reads every node). Without it the mirror reads ListNodes,
// BundleById and ListBundles.
type StateReader interface {
	// NodeByID is the node as ListNodes renders it; an error matching
	// norsk.ErrNotFound when there is no such node.
	NodeByID(ctx context.Context, nodeID string) (*norsk.Node, error)
	// BundleRecord is the bundle; an error matching norsk.ErrNotFound when
	// there is no such bundle.
	BundleRecord(ctx context.Context, bundleID string) (*managerv1.Bundle, error)
	// BundleRecords is every bundle.
	BundleRecords(ctx context.Context) ([]*managerv1.Bundle, error)
}

// DrainReader is what an API inside the Manager's process may add for the
// node drains' reads. A drain step must not decide on the mirror, which
// may lag the store (drainView); with DrainView it reads, fresh, only what
// its drains concern, so a pass while a node drains costs in proportion to
// that node's jobs. Without it such a pass reads the whole state.
type DrainReader interface {
	// DrainView reads, from one snapshot of the store, the nodes named
	// (those that exist, as ListNodes renders them), every job with an
	// instance bound to one of them or named by an item of one's drain,
	// without history, in id order, and every migration of those jobs.
	// Only Nodes, Jobs and Migrations are set.
	DrainView(ctx context.Context, nodeIDs []string) (View, error)
}

// Subscription is a follow of the Manager's events, in index order.
type Subscription interface {
	// Next returns the next events (at least one), blocking until there are
	// some or ctx ends. An error ends the subscription: the subscriber has
	// fallen behind what is held, or the state was replaced.
	Next(ctx context.Context) ([]*managerv1.Event, error)
}

// Why a full pass ran (the reason label of reconciles_total).
const (
	fullStart     = "start"     // Run's first pass
	fullReconcile = "reconcile" // the Reconcile timer: the safety net
	fullFailed    = "failed"    // the pass before failed
	fullResync    = "resync"    // the event stream was cut or resynced
	fullBurst     = "burst"     // out of process, a burst touched much of the store
)

// fullReasons are the reasons a full pass runs, in the order they are
// reported.
var fullReasons = []string{fullStart, fullReconcile, fullFailed, fullResync, fullBurst}

// changes are what the events since the last pass touched: the jobs,
// bundles and nodes, and whether the migrations or the leases changed.
// allNodes asks for every node (an event named a node without its id);
// full asks for a full pass and says why (the stream was cut or resynced,
// or a pass failed). The stream's reader notes, Run's goroutine takes.
type changes struct {
	mu         sync.Mutex
	jobs       map[string]bool
	bundles    map[string]bool
	nodes      map[string]bool
	allNodes   bool
	migrations bool
	// migrationIDs are the migrations the events named (migrations: one
	// that named none).
	migrationIDs map[string]bool
	leases       bool
	full         string
}

// touched is one pass's worth of changes.
type touched struct {
	jobs, bundles, nodes, migrationIDs map[string]bool
	allNodes, migrations, leases       bool
	// full, when set, is why the pass must read everything.
	full string
}

// note records what ev touched; it reports whether ev touched anything
// the AutoManager decides on.
func (c *changes) note(ev *managerv1.Event) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	job := func(id string) { mark(&c.jobs, id) }
	bundle := func(id string) { mark(&c.bundles, id) }
	switch k := ev.GetKind().(type) {
	case *managerv1.Event_JobCreated:
		job(k.JobCreated.GetJob().GetJob().GetJobId())
	case *managerv1.Event_JobUpdated:
		job(k.JobUpdated.GetJob().GetJob().GetJobId())
	case *managerv1.Event_JobDeleted:
		job(k.JobDeleted.GetJobId())
	case *managerv1.Event_Placement:
		job(k.Placement.GetJobId())
	case *managerv1.Event_NodeOnline:
		c.node(k.NodeOnline)
	case *managerv1.Event_NodeLost:
		c.node(k.NodeLost)
	case *managerv1.Event_NodeStopping:
		c.node(k.NodeStopping)
	case *managerv1.Event_NodeTerminated:
		c.node(k.NodeTerminated)
	case *managerv1.Event_NodeTagsUpdated:
		c.node(k.NodeTagsUpdated)
	case *managerv1.Event_BundleCreated:
		bundle(k.BundleCreated.GetBundle().GetBundleId())
	case *managerv1.Event_BundleUpdated:
		bundle(k.BundleUpdated.GetBundle().GetBundleId())
	case *managerv1.Event_BundleDeleted:
		bundle(k.BundleDeleted.GetBundleId())
	case *managerv1.Event_LeaseStatus:
		c.leases = true
	case *managerv1.Event_MigrationUpdated:
		c.migration(k.MigrationUpdated.GetMigrationId())
		job(k.MigrationUpdated.GetSourceJobId())
	case *managerv1.Event_MigrationForgotten:
		if len(k.MigrationForgotten.GetMigrationIds()) == 0 {
			c.migration("")
		}
		for _, id := range k.MigrationForgotten.GetMigrationIds() {
			c.migration(id)
		}
	case *managerv1.Event_MigrationAborted:
		c.migration(k.MigrationAborted.GetMigrationId())
	case *managerv1.Event_JobSnapshot, *managerv1.Event_NodeSnapshot, *managerv1.Event_InitialDataComplete:
		// A resync: what the stream missed is not known.
		c.full = fullResync
	default:
		return false
	}
	return true
}

// migration notes the migration an event names (every one when it names
// none). The caller holds c.mu.
func (c *changes) migration(id string) {
	if id == "" {
		c.migrations = true
		return
	}
	mark(&c.migrationIDs, id)
}

// node notes the node a node event names (every node when it names none).
// The caller holds c.mu.
func (c *changes) node(ev *managerv1.NodeEvent) {
	id := ev.GetNode().GetNodeId()
	if id == "" {
		c.allNodes = true
		return
	}
	mark(&c.nodes, id)
}

// mark adds id to the set *ids, making the set first if there is none.
func mark(ids *map[string]bool, id string) {
	if *ids == nil {
		*ids = map[string]bool{}
	}
	(*ids)[id] = true
}

// acted notes the jobs and bundles a pass's actions changed.
func (c *changes) acted(acts []Action) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range acts {
		if a.JobID != "" {
			if c.jobs == nil {
				c.jobs = map[string]bool{}
			}
			c.jobs[a.JobID] = true
		}
		if a.BundleID != "" {
			if c.bundles == nil {
				c.bundles = map[string]bool{}
			}
			c.bundles[a.BundleID] = true
		}
	}
}

// actedOnNode notes a node a pass's action created or re-tagged (a spare
// made or released): the next pass reads it back whether or not an event
// said so. A node created is recorded STARTING with no event at all until
// its worker connects, so without this a pass in between (any wide change
// wakes one) counts its tier a node short and creates another.
func (c *changes) actedOnNode(id string) {
	if id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		c.nodes = map[string]bool{}
	}
	c.nodes[id] = true
}

// fullNext asks the next pass to read everything, for the reason why.
func (c *changes) fullNext(why string) {
	c.mu.Lock()
	c.full = why
	c.mu.Unlock()
}

// take returns the changes noted so far and forgets them.
func (c *changes) take() touched {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := touched{jobs: c.jobs, bundles: c.bundles, nodes: c.nodes, migrationIDs: c.migrationIDs,
		allNodes: c.allNodes, migrations: c.migrations, leases: c.leases, full: c.full}
	c.jobs, c.bundles, c.nodes, c.migrationIDs = nil, nil, nil, nil
	c.allNodes, c.migrations, c.leases, c.full = false, false, false, ""
	return t
}
