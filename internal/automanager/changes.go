package automanager

import (
	"context"
	"sync"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
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

// Subscription is a follow of the Manager's events, in index order.
type Subscription interface {
	// Next returns the next events (at least one), blocking until there are
	// some or ctx ends. An error ends the subscription: the subscriber has
	// fallen behind what is held, or the state was replaced.
	Next(ctx context.Context) ([]*managerv1.Event, error)
}

// changes are what the events since the last pass touched: the jobs,
// bundles and whether the nodes, the migrations or the leases changed.
// full asks for a full reconcile (the stream was cut or resynced, or a
// pass failed). The stream's reader notes, Run's goroutine takes.
type changes struct {
	mu         sync.Mutex
	jobs       map[string]bool
	bundles    map[string]bool
	nodes      bool
	migrations bool
	leases     bool
	full       bool
}

// touched is one pass's worth of changes.
type touched struct {
	jobs, bundles             map[string]bool
	nodes, migrations, leases bool
	full                      bool
}

// note records what ev touched; it reports whether ev touched anything
// the AutoManager decides on.
func (c *changes) note(ev *managerv1.Event) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	job := func(id string) {
		if c.jobs == nil {
			c.jobs = map[string]bool{}
		}
		c.jobs[id] = true
	}
	bundle := func(id string) {
		if c.bundles == nil {
			c.bundles = map[string]bool{}
		}
		c.bundles[id] = true
	}
	switch k := ev.GetKind().(type) {
	case *managerv1.Event_JobCreated:
		job(k.JobCreated.GetJob().GetJob().GetJobId())
	case *managerv1.Event_JobUpdated:
		job(k.JobUpdated.GetJob().GetJob().GetJobId())
	case *managerv1.Event_JobDeleted:
		job(k.JobDeleted.GetJobId())
	case *managerv1.Event_Placement:
		job(k.Placement.GetJobId())
	case *managerv1.Event_NodeOnline, *managerv1.Event_NodeLost, *managerv1.Event_NodeStopping,
		*managerv1.Event_NodeTerminated, *managerv1.Event_NodeTagsUpdated:
		c.nodes = true
	case *managerv1.Event_BundleCreated:
		bundle(k.BundleCreated.GetBundle().GetBundleId())
	case *managerv1.Event_BundleUpdated:
		bundle(k.BundleUpdated.GetBundle().GetBundleId())
	case *managerv1.Event_BundleDeleted:
		bundle(k.BundleDeleted.GetBundleId())
	case *managerv1.Event_LeaseStatus:
		c.leases = true
	case *managerv1.Event_MigrationUpdated:
		c.migrations = true
		job(k.MigrationUpdated.GetSourceJobId())
	case *managerv1.Event_MigrationForgotten, *managerv1.Event_MigrationAborted:
		c.migrations = true
	case *managerv1.Event_JobSnapshot, *managerv1.Event_NodeSnapshot, *managerv1.Event_InitialDataComplete:
		// A resync: what the stream missed is not known.
		c.full = true
	default:
		return false
	}
	return true
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

// fullNext asks the next pass to read everything.
func (c *changes) fullNext() {
	c.mu.Lock()
	c.full = true
	c.mu.Unlock()
}

// take returns the changes noted so far and forgets them.
func (c *changes) take() touched {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := touched{jobs: c.jobs, bundles: c.bundles, nodes: c.nodes, migrations: c.migrations, leases: c.leases, full: c.full}
	c.jobs, c.bundles = nil, nil
	c.nodes, c.migrations, c.leases, c.full = false, false, false, false
	return t
}
