package manager

import (
	"context"
	"fmt"
	"slices"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// localAPI is the AutoManager's API inside the primary: its reads come
// straight from this member's store (what the read calls' handlers answer,
// without the loopback HTTP, the encoding or the credential check) and its
// events straight from the broker; its writes still go through the SDK
// over the member's own listener, so every change it makes is an audited
// API call like an operator's.
type localAPI struct {
	*norsk.Manager
	s *Server
}

var (
	_ automanager.API         = localAPI{}
	_ automanager.Local       = localAPI{}
	_ automanager.JobReader   = localAPI{}
	_ automanager.StateReader = localAPI{}
	_ automanager.DrainReader = localAPI{}
)

func newLocalAPI(s *Server, m *norsk.Manager) localAPI {
	return localAPI{Manager: m, s: s}
}

func notFound(what, id string) error {
	return fmt.Errorf("no %s %s: %w", what, apierr.Quote(id), norsk.ErrNotFound)
}

// ListNodes is the ListNodes call's answer (with the primary's live facts).
func (l localAPI) ListNodes(ctx context.Context) ([]*norsk.Node, error) {
	r := l.s.st().State().Snapshot()
	var out []*norsk.Node
	for _, rec := range r.Nodes(nil) {
		out = append(out, l.s.api.NodeView(r, rec))
	}
	return out, nil
}

// NodeByID is one node as ListNodes renders it (automanager.StateReader).
func (l localAPI) NodeByID(ctx context.Context, nodeID string) (*norsk.Node, error) {
	r := l.s.st().State().Snapshot()
	rec := r.Node(nil, nodeID)
	if rec == nil {
		return nil, notFound("node", nodeID)
	}
	return l.s.api.NodeView(r, rec), nil
}

// DrainView is the draining nodes, the jobs on them or named by their
// drains' items and those jobs' migrations, from one snapshot
// (automanager.DrainReader): a drain step's fresh read, in proportion to
// the nodes' jobs rather than the store.
func (l localAPI) DrainView(ctx context.Context, nodeIDs []string) (automanager.View, error) {
	r := l.s.st().State().Snapshot()
	var v automanager.View
	jobs := map[string]bool{}
	for _, id := range nodeIDs {
		rec := r.Node(nil, id)
		if rec == nil {
			continue
		}
		n := l.s.api.NodeView(r, rec)
		v.Nodes = append(v.Nodes, n)
		for _, in := range r.InstancesOnNode(nil, id) {
			jobs[in.GetJobId()] = true
		}
		for _, it := range n.GetDrain().GetItems() {
			jobs[it.GetJobId()] = true
		}
	}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return automanager.View{}, err
		}
		rec := r.Job(nil, id)
		if rec == nil {
			continue // an instance outlives its deleted job until it stops
		}
		v.Jobs = append(v.Jobs, r.JobView(rec, false))
		v.Migrations = append(v.Migrations, r.Migrations(nil, id)...)
	}
	return v, nil
}

// BundleRecord is the bundle alone, without its jobs' status
// (automanager.StateReader).
func (l localAPI) BundleRecord(ctx context.Context, bundleID string) (*managerv1.Bundle, error) {
	b := l.s.st().State().Snapshot().Bundle(nil, bundleID)
	if b == nil {
		return nil, notFound("bundle", bundleID)
	}
	return b, nil
}

// BundleRecords is every bundle alone (automanager.StateReader).
func (l localAPI) BundleRecords(ctx context.Context) ([]*managerv1.Bundle, error) {
	return l.s.st().State().Snapshot().Bundles(nil), nil
}

// JobSearch answers the search of every job (without history) from the
// store; any other search goes through the API.
func (l localAPI) JobSearch(ctx context.Context, s norsk.JobSearchSettings) ([]*norsk.JobWithHistory, error) {
	if len(s.Filters) > 0 || s.IncludeHistory || s.Limit > 0 || s.AfterJobID != "" {
		return l.Manager.JobSearch(ctx, s)
	}
	r := l.s.st().State().Snapshot()
	var out []*norsk.JobWithHistory
	r.Jobs(nil, "", func(rec *storev1.JobRecord) bool {
		out = append(out, r.JobView(rec, false))
		return ctx.Err() == nil
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// JobById is the job with its history and instances.
func (l localAPI) JobById(ctx context.Context, jobID string) (*norsk.JobWithHistory, error) {
	r := l.s.st().State().Snapshot()
	rec := r.Job(nil, jobID)
	if rec == nil {
		return nil, notFound("job", jobID)
	}
	return r.JobView(rec, true), nil
}

// JobWithoutHistory is the job and its instances (automanager.JobReader).
func (l localAPI) JobWithoutHistory(ctx context.Context, jobID string) (*norsk.JobWithHistory, error) {
	r := l.s.st().State().Snapshot()
	rec := r.Job(nil, jobID)
	if rec == nil {
		return nil, notFound("job", jobID)
	}
	return r.JobView(rec, false), nil
}

// ListBundles is every bundle with its jobs' status.
func (l localAPI) ListBundles(ctx context.Context) ([]*managerv1.BundleWithJobs, error) {
	r := l.s.st().State().Snapshot()
	var out []*managerv1.BundleWithJobs
	for _, b := range r.Bundles(nil) {
		out = append(out, r.BundleView(b))
	}
	return out, nil
}

// BundleById is one bundle with its jobs' status.
func (l localAPI) BundleById(ctx context.Context, bundleID string) (*managerv1.BundleWithJobs, error) {
	r := l.s.st().State().Snapshot()
	b := r.Bundle(nil, bundleID)
	if b == nil {
		return nil, notFound("bundle", bundleID)
	}
	return r.BundleView(b), nil
}

// ListMigrations is the migration records (of one job, or all).
func (l localAPI) ListMigrations(ctx context.Context, jobID string) ([]*managerv1.MigrationState, error) {
	return l.s.st().State().Snapshot().Migrations(nil, jobID), nil
}

// GetMigration is one migration record.
func (l localAPI) GetMigration(ctx context.Context, migrationID string) (*managerv1.MigrationState, error) {
	m := l.s.st().State().Snapshot().Migration(nil, migrationID)
	if m == nil {
		return nil, notFound("migration", migrationID)
	}
	return m, nil
}

// GetLeaseStatus is every lease as this primary sees it.
func (l localAPI) GetLeaseStatus(ctx context.Context) (*managerv1.LeaseStatus, error) {
	ctl := l.s.controller()
	if ctl == nil {
		return nil, fmt.Errorf("lease status: this member is not driving the workers (no primary term running): %w", norsk.ErrUnavailable)
	}
	return api.LeaseStatusOf(l.s.st().State().Snapshot(), ctl.LeaseRefreshes(), l.s.cfg.LeaseTTL, l.s.cfg.Clock.Now()), nil
}

// Subscribe follows the broker after index after (0: from now on).
func (l localAPI) Subscribe(ctx context.Context, after uint64) (automanager.Subscription, error) {
	b := l.s.st().Broker()
	if after == 0 {
		return b.SubscribeTail(), nil
	}
	sub, err := b.SubscribeAfter(after)
	if err != nil {
		return nil, fmt.Errorf("events after index %d: %w", after, err)
	}
	return sub, nil
}

var _ automanager.Subscription = (*events.Subscription)(nil)
