package automanager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/placement"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// maxMigrationReads is the most migrations a pass reads one by one; past
// it the pass lists them all.
const maxMigrationReads = 256

// passChanges is a pass over what the events touched: it re-reads those
// jobs, bundles, nodes and migrations into the mirror, and plans the jobs
// they concern — the touched jobs, every job of a touched bundle or of the
// bundle of a touched job (anti-affinity and rolling are decided bundle by
// bundle), the jobs on a node that changed — and, when the room or the
// rules may have changed or a wait fell due (due), the pending ones. The
// room every other job's instances take comes from the mirror. Its work is
// in proportion to what changed: a write that touches a job nobody keeps
// placed costs one read of that job, and a change to one node or bundle a
// read of that node or bundle (in process: StateReader).
func (a *AutoManager) passChanges(ctx context.Context, t touched, due bool) (time.Time, error) {
	a.mirrorMu.Lock()
	m := a.mirror
	sr, records := a.cfg.API.(StateReader)
	// Out of process, where each job is a round trip, a burst that touched
	// much of the store is cheaper read whole. In process a job's read
	// costs what its share of the whole read does, and a full pass plans
	// every job as well: it is never cheaper (a full pass per burst is what
	// made the passes of a fleet being filled grow with the store).
	if _, local := a.cfg.API.(Local); !local && len(t.jobs) > 1000 && len(t.jobs) > len(m.jobs)/4 {
		a.mirrorMu.Unlock()
		return a.fullPass(ctx, fullBurst)
	}
	defer a.mirrorMu.Unlock()
	plan := map[string]bool{}
	bundles := map[string]bool{}
	if !a.pendingNext.IsZero() && !a.cfg.Clock.Now().Before(a.pendingNext) {
		due = true // a wait fell due, whatever woke this pass
	}
	wide := due || t.leases
	api := a.cfg.API
	var changedNodes []string
	switch {
	case t.allNodes || (len(t.nodes) > 0 && !records):
		nodes, err := api.ListNodes(ctx)
		if err != nil {
			return time.Time{}, fmt.Errorf("list nodes: %w", err)
		}
		changedNodes = m.setNodes(nodes)
	case len(t.nodes) > 0:
		for _, id := range sortedKeys(t.nodes) {
			n, err := orAbsent(sr.NodeByID(ctx, id))
			if err != nil {
				return time.Time{}, fmt.Errorf("node %s: %w", id, err)
			}
			if m.putNode(id, n) {
				changedNodes = append(changedNodes, id)
			}
		}
	}
	if len(changedNodes) > 0 {
		wide = true
		for _, j := range m.jobsOnNodes(changedNodes) {
			plan[j] = true
		}
	}
	switch {
	case t.migrations || len(t.migrationIDs) > maxMigrationReads:
		migs, err := api.ListMigrations(ctx, "")
		if err != nil {
			return time.Time{}, fmt.Errorf("list migrations: %w", err)
		}
		for _, j := range m.setMigrations(migs) {
			plan[j] = true
		}
		wide = true // the repair limits count the records
	case len(t.migrationIDs) > 0:
		// The migrations the events named, one record each: every
		// migration ever run stays in the store until an operator
		// forgets it, so the whole list grows without bound.
		for _, id := range sortedKeys(t.migrationIDs) {
			st, err := orAbsent(api.GetMigration(ctx, id))
			if err != nil {
				return time.Time{}, fmt.Errorf("migration %s: %w", id, err)
			}
			for _, j := range m.putMigration(id, st) {
				plan[j] = true
			}
		}
		wide = true
	}
	for id := range t.bundles {
		var b *managerv1.Bundle
		var err error
		if records {
			b, err = sr.BundleRecord(ctx, id)
		} else {
			var bw *managerv1.BundleWithJobs
			bw, err = api.BundleById(ctx, id)
			b = bw.GetBundle()
		}
		if b, err = orAbsent(b, err); err != nil {
			return time.Time{}, fmt.Errorf("bundle %s: %w", id, err)
		}
		m.putBundle(id, b)
		bundles[id] = true
		wide = true
	}
	jobs, err := a.readJobs(ctx, t.jobs)
	if err != nil {
		return time.Time{}, err
	}
	for id := range t.jobs {
		plan[id] = true
		if jh := jobs[id]; jh != nil {
			if m.putJob(jh) {
				wide = true
			}
		} else if m.deleteJob(id) {
			wide = true
		}
	}
	if wide {
		for id := range m.pendingJobs {
			plan[id] = true
		}
		for id := range m.pendingBundles {
			bundles[id] = true
		}
	}
	// Bundles are planned whole: every job of a bundle a planned job
	// belongs to, and the bundle.
	for id := range plan {
		if jh := m.jobs[id]; jh != nil {
			if b := jh.GetJob().GetTags()[placement.TagBundleID]; b != "" {
				bundles[b] = true
			}
		}
	}
	for b := range bundles {
		for _, id := range m.jobsOfBundle(b) {
			plan[id] = true
		}
	}
	var next time.Time
	if !wide && len(bundles) == 0 && m.allQuiet(plan) {
		// Nothing to decide (the common write: a job nobody keeps placed,
		// or one running where it is): no plan, whatever the fleet's size.
		for id := range plan {
			delete(m.pendingJobs, id)
		}
		plan = nil
	}
	// A node that came, went or changed may be a spare to replace: with
	// spares configured, a wide change is always decided.
	if len(plan) > 0 || len(bundles) > 0 || (wide && len(a.cfg.Policy.Spares) > 0) {
		v := m.view(plan, bundles)
		if next, err = a.decide(ctx, v, plan); err != nil {
			return time.Time{}, err
		}
	}
	if wide {
		// Every pending job and bundle was planned: next covers them all.
		a.pendingNext = next
	} else if !next.IsZero() && (a.pendingNext.IsZero() || next.Before(a.pendingNext)) {
		a.pendingNext = next
	}
	return a.pendingNext, nil
}

// readJobs reads the jobs by id, at most Parallel at once (one read each
// in process); a job that is gone is absent from the answer.
func (a *AutoManager) readJobs(ctx context.Context, ids map[string]bool) (map[string]*managerv1.JobWithHistory, error) {
	list := make([]string, 0, len(ids))
	for id := range ids {
		list = append(list, id)
	}
	out := make(map[string]*managerv1.JobWithHistory, len(list))
	var mu sync.Mutex
	var errs []error
	get := a.cfg.API.JobById
	if jr, ok := a.cfg.API.(JobReader); ok {
		get = jr.JobWithoutHistory
	}
	read := func(i int) {
		jh, err := get(ctx, list[i])
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, norsk.ErrNotFound):
		case err != nil:
			errs = append(errs, fmt.Errorf("job %s: %w", list[i], err))
		default:
			out[list[i]] = jh
		}
	}
	if _, local := a.cfg.API.(Local); local {
		for i := range list {
			read(i)
		}
	} else {
		a.parallel(len(list), read)
	}
	return out, errors.Join(errs...)
}

// orAbsent is a read's answer with "not found" as nil: the record is gone.
func orAbsent[T any](v *T, err error) (*T, error) {
	if errors.Is(err, norsk.ErrNotFound) {
		return nil, nil
	}
	return v, err
}
