package automanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/placement"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Config configures an AutoManager.
type Config struct {
	API    API
	Policy Policy
	Clock  clock.Clock
	Logger *slog.Logger
	// Metrics, when set, counts placements and what cannot be placed.
	Metrics *Metrics
	// Settle is how long a wake-up waits for more events before deciding,
	// so a burst of changes is handled in one pass (default 20 ms).
	Settle time.Duration
	// Resync bounds the time between passes when nothing wakes it (default
	// 10 s): the pending jobs and bundles are planned again at least this
	// often.
	Resync time.Duration
	// Reconcile is the time between full passes, which read and plan every
	// job (default 1 min): the safety net for a change no event named. A
	// pass that failed, or a cut event stream, brings the next one forward.
	Reconcile time.Duration
	// Parallel is how many calls a pass makes at once (default 16).
	Parallel int
	// Elastic, when set, gives each pass the elastic tiers in place of
	// Policy.Elastic (a cloud tier's types come from the instance-type
	// cache, which warms after the AutoManager starts and changes with
	// the overrides file).
	Elastic func() []ElasticTier
}

// AutoManager keeps automatically placed jobs placed. Run drives it; it
// holds nothing that must survive it.
type AutoManager struct {
	cfg Config
	log *slog.Logger
	// unplaced remembers what was logged as unplaceable (by job and role),
	// so a summary is logged once per change rather than on every pass;
	// degraded counts the degraded instances by bundle. Only the passes'
	// goroutine touches these, the mirror and pendingNext.
	unplaced map[[2]string]string
	// sparesBlocked: the tiers whose spares the last pass that planned
	// spares could not create, and why (report logs each change).
	sparesBlocked map[string]string
	degraded      map[string]int
	// mirror is the state the passes decide on; changes is what the events
	// touched since the last pass. mirrorMu guards the mirror: Run's
	// goroutine holds it through a pass except while the pass acts and
	// steps the drains (decide); the saga takes it to place a migration's
	// target on the mirror's placement state and to note the target it
	// started (keptTargets).
	mirrorMu sync.Mutex
	mirror   *mirror
	// templates remembers the bundle jobs found running their template
	// (templates.go); guarded by mirrorMu as the mirror is.
	templates *templateMemo
	changes   changes
	// pendingNext is when the earliest wait of the pending jobs and
	// bundles falls due (zero: none).
	pendingNext time.Time
	// holdMu guards hold: the elastic tiers whose last node creation failed,
	// and until when no other is tried there.
	holdMu sync.Mutex
	hold   map[string]time.Time
	// saga runs the migrations.
	saga *Saga
	// passStart is when the current pass read the state (placement
	// latency); only Run's goroutine touches it.
	passStart time.Time
	// prefetchMu guards prefetched: when a spare was last asked to
	// prefetch which images (View.Prefetched).
	prefetchMu sync.Mutex
	prefetched map[string]time.Time
}

// ProvisionHoldAfterFailure is how long a tier whose node creation failed
// is left alone.
const ProvisionHoldAfterFailure = 30 * time.Second

// StartBatch is the most starts one StartJobs call of a pass carries.
const StartBatch = 500

// New returns an AutoManager; Run starts it.
func New(cfg Config) *AutoManager {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 20 * time.Millisecond
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Second
	}
	if cfg.Reconcile <= 0 {
		cfg.Reconcile = time.Minute
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 16
	}
	cfg.Policy.defaults()
	a := &AutoManager{cfg: cfg, log: cfg.Logger.With("component", "automanager"), unplaced: map[[2]string]string{}, degraded: map[string]int{},
		hold: map[string]time.Time{}, prefetched: map[string]time.Time{}, mirror: newMirror(cfg.Policy.Placement), templates: newTemplateMemo()}
	a.saga = newSaga(cfg.API, cfg.Clock, cfg.Logger, cfg.Policy, cfg.Metrics)
	a.saga.kept = keptTargets{a}
	return a
}

// Run keeps its view of the state (a mirror) current from the event
// stream and plans only what the events touched: it makes a full pass at
// once (every job, node, bundle and migration read and planned), then,
// after each burst of events (Settle), a pass over the jobs and bundles
// the events named — and whatever is pending (waiting for a time or for
// room) when something that could change its decision happened or a wait
// fell due. Every Resync it plans the pending again, and every Reconcile
// (or after a pass failed, or the stream was cut) it makes a full pass, the
// safety net for anything an event did not say. It runs until ctx ends and
// returns ctx's error.
func (a *AutoManager) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	// The migrations in flight are taken over first; the event stream is
	// resumed from the oldest of their records so no handshake is missed.
	var resume uint64
	for {
		var err error
		if resume, err = a.saga.rebuild(ctx); err == nil {
			break
		}
		a.log.Warn("cannot read the migrations in flight; retrying", "err", err)
		t := a.cfg.Clock.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
	// In process the subscription is made before the first read, so no
	// change falls between the two.
	var sub Subscription
	if l, ok := a.cfg.API.(Local); ok {
		var err error
		if sub, err = l.Subscribe(ctx, resume); err != nil {
			a.log.Warn("the migrations' events are no longer held; following from now", "err", err)
			if sub, err = l.Subscribe(ctx, 0); err != nil {
				return fmt.Errorf("subscribe to events: %w", err)
			}
		}
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		a.saga.run(ctx)
	}()
	_ = a.saga.do(ctx, a.saga.reconcile)
	go func() {
		defer wg.Done()
		if sub != nil {
			a.followLocal(ctx, wake, sub)
		} else {
			a.follow(ctx, wake, resume)
		}
	}()
	clk := a.cfg.Clock
	full, due := fullStart, false
	lastFull := clk.Now()
	for {
		var next time.Time
		var err error
		ch := a.changes.take()
		if full == "" {
			full = ch.full
		}
		if full == "" && clk.Now().Sub(lastFull) >= a.cfg.Reconcile {
			full = fullReconcile
		}
		if full != "" {
			lastFull = clk.Now()
			next, err = a.fullPass(ctx, full)
		} else {
			next, err = a.passChanges(ctx, ch, due)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		full, due = "", false
		wait := a.cfg.Resync
		var acts actsFailed
		switch {
		case errors.As(err, &acts):
			// What failed is read again (acted): the next pass, in a
			// second, decides on it from the store.
			a.log.Warn("calls of a pass failed; retrying", "err", err)
			wait = time.Second
		case err != nil:
			a.log.Warn("pass failed; the next one reads everything", "err", err)
			full = fullFailed
			wait = time.Second
		}
		if !next.IsZero() {
			if d := next.Sub(clk.Now()); d < wait {
				wait = max(d, 0)
			}
		}
		if d := a.cfg.Reconcile - clk.Now().Sub(lastFull); d < wait {
			wait = max(d, 0)
		}
		t := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
			due = true
		case <-wake:
			t.Stop()
			settle := clk.NewTimer(a.cfg.Settle)
			select {
			case <-ctx.Done():
				settle.Stop()
				return ctx.Err()
			case <-settle.C():
			}
			select { // the events that arrived while settling are covered
			case <-wake:
			default:
			}
		}
	}
}

// follow notes what each event of the SDK's stream touched, wakes Run, and
// hands the saga the events it follows. It resumes after index resume (0:
// live events only); once the stream is open the saga reconciles what it
// took over.
func (a *AutoManager) follow(ctx context.Context, wake chan<- struct{}, resume uint64) {
	s := a.cfg.API.EventStream(ctx, norsk.EventStreamSettings{AfterIndex: resume, SkipSnapshot: resume == 0})
	defer s.Close()
	for s.Next() {
		a.onEvent(ctx, wake, s.Event())
	}
	if err := s.Err(); err != nil && ctx.Err() == nil {
		a.log.Warn("event stream ended; full passes continue on the reconcile timer", "err", err)
	}
}

// followLocal is follow over an in-process subscription: when it is cut
// (fallen behind, or the state was replaced by a restore) it asks for a
// full pass and subscribes again from now.
func (a *AutoManager) followLocal(ctx context.Context, wake chan<- struct{}, sub Subscription) {
	l := a.cfg.API.(Local)
	for {
		evs, err := sub.Next(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			a.log.Warn("event subscription cut; reading everything again", "err", err)
			if sub, err = l.Subscribe(ctx, 0); err != nil {
				a.log.Warn("cannot subscribe to events; full passes continue on the reconcile timer", "err", err)
				return
			}
			a.changes.fullNext(fullResync)
			a.signal(wake)
			continue
		}
		for _, ev := range evs {
			a.onEvent(ctx, wake, ev)
		}
	}
}

// onEvent notes one event, hands it to the saga if it follows it, and
// wakes Run when it touched something the passes decide on.
func (a *AutoManager) onEvent(ctx context.Context, wake chan<- struct{}, ev *managerv1.Event) {
	if a.saga.wants(ev) {
		_ = a.saga.do(ctx, func(ctx context.Context) { a.saga.onEvent(ctx, ev) })
	}
	if a.changes.note(ev) {
		a.signal(wake)
	}
}

func (a *AutoManager) signal(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// drainView is the view the running drains step on: none when no node of
// v drains; else a fresh read. A drain lists and judges a node's jobs from
// it, so it must not lag the store as the mirror may (a job just migrated
// onto the node would be missed, or one just moved off it judged moved by
// another hand). In process (DrainReader) the read is of the draining
// nodes, their jobs and the jobs their items name, with those jobs'
// migrations — everything planDrain looks at, in proportion to the
// draining nodes' jobs; out of process it is the whole state.
func (a *AutoManager) drainView(ctx context.Context, v View) (View, error) {
	var draining []string
	for _, n := range v.Nodes {
		if n.GetDrain().GetState() == drainRunning {
			draining = append(draining, n.GetNodeId())
		}
	}
	if len(draining) == 0 {
		return View{Nodes: v.Nodes}, nil
	}
	if dr, ok := a.cfg.API.(DrainReader); ok {
		dv, err := dr.DrainView(ctx, draining)
		if err != nil {
			return View{}, fmt.Errorf("read the draining nodes: %w", err)
		}
		return dv, nil
	}
	return a.read(ctx)
}

// Pass is a full pass: it reads the Manager's whole state into the mirror,
// decides for every job and bundle and acts once. It returns when the next
// waiting decision falls due (zero: none). It counts as a reconcile.
func (a *AutoManager) Pass(ctx context.Context) (time.Time, error) {
	return a.fullPass(ctx, fullReconcile)
}

// fullPass is Pass, counted under why (one of fullReasons).
func (a *AutoManager) fullPass(ctx context.Context, why string) (time.Time, error) {
	start := a.cfg.Clock.Now()
	a.changes.take() // a full read covers what was noted before it
	v, err := a.read(ctx)
	if err != nil {
		a.changes.fullNext(fullFailed)
		return time.Time{}, err
	}
	a.mirrorMu.Lock()
	defer a.mirrorMu.Unlock()
	a.mirror.load(v)
	a.templates.keep(func(id string) bool { return a.mirror.jobs[id] != nil })
	// The mirror's placement state, built from what was just read if this
	// pass places anything, is the one the passes after it keep (decision
	// 0068).
	v.Placement, v.Reachable = a.mirror.placement, a.mirror.reachable
	next, err := a.decide(ctx, v, nil)
	if m := a.cfg.Metrics; m != nil {
		m.Reconciles.WithLabelValues(why).Inc()
		m.ReconcileSeconds.Observe(a.cfg.Clock.Now().Sub(start).Seconds())
	}
	a.pendingNext = next
	return next, err
}

// decide plans v, fetches what the plan asks for, acts, reports and
// updates the pending sets. scope names the jobs v plans (nil: every job).
// It is called with mirrorMu held and returns with it held; it lets go of
// it while it acts and steps the drains, which wait on the saga, and the
// saga takes it to place a migration's target (keptTargets).
func (a *AutoManager) decide(ctx context.Context, v View, scope map[string]bool) (time.Time, error) {
	start := a.cfg.Clock.Now()
	v.ProvisionHold = a.holds()
	v.Prefetched = a.prefetches()
	v.templates = a.templates
	if scope != nil && len(a.cfg.Policy.Spares) > 0 {
		// The spares' images come from every job of their templates, not
		// only the ones this pass plans (in proportion to the jobs, only
		// when spares are configured).
		v.WarmJobs = a.mirror.allJobs()
	}
	d := Plan(v, a.policy(), a.cfg.Clock.Now())
	// Plan asks for what it lacks one step at a time (the lease status, then
	// the histories of what the leases let through): fill and plan again
	// until it needs nothing more.
	for round := 0; len(d.NeedHistory) > 0 || d.NeedLeases; round++ {
		if round == 3 {
			return time.Time{}, fmt.Errorf("plan still needs %d histories (leases: %v) after %d rounds", len(d.NeedHistory), d.NeedLeases, round)
		}
		if err := a.fill(ctx, &v, d); err != nil {
			return time.Time{}, err
		}
		d = Plan(v, a.policy(), a.cfg.Clock.Now())
	}
	a.passStart = start
	a.mirrorMu.Unlock()
	var err error
	if aerr := a.act(ctx, d); aerr != nil {
		err = actsFailed{aerr}
	}
	// What was acted on is read again by the next pass, whether or not its
	// events have been seen by then: the mirror never plans on a binding
	// it has not read back (nor on a tier without the nodes it created:
	// do notes those, changes.actedOnNode).
	a.changes.acted(d.Actions)
	a.report(v, d, scope)
	a.mirrorMu.Lock()
	a.mirror.settle(v, d)
	a.mirrorMu.Unlock()
	// Node drains step on a fresh read (drainView), with every job they
	// need whatever this pass planned.
	var drainAt time.Time
	dv, derr := a.drainView(ctx, v)
	if derr == nil {
		drainAt, derr = a.Drains(ctx, dv)
	}
	a.mirrorMu.Lock()
	if derr != nil {
		err = errors.Join(err, derr)
	}
	if !drainAt.IsZero() && (d.NextAt.IsZero() || drainAt.Before(d.NextAt)) {
		d.NextAt = drainAt
	}
	if m := a.cfg.Metrics; m != nil {
		m.Passes.Inc()
		m.PassSeconds.Observe(a.cfg.Clock.Now().Sub(start).Seconds())
		m.PassJobs.Observe(float64(len(v.Jobs)))
	}
	return d.NextAt, err
}

// readView fetches the nodes, jobs (without history), bundles and the jobs
// with a migration in flight.
func readView(ctx context.Context, api API) (View, error) {
	var v View
	var err error
	if v.Nodes, err = api.ListNodes(ctx); err != nil {
		return v, fmt.Errorf("list nodes: %w", err)
	}
	if v.Jobs, err = api.JobSearch(ctx, norsk.JobSearchSettings{}); err != nil {
		return v, fmt.Errorf("list jobs: %w", err)
	}
	if sr, ok := api.(StateReader); ok {
		if v.Bundles, err = sr.BundleRecords(ctx); err != nil {
			return v, fmt.Errorf("list bundles: %w", err)
		}
	} else {
		bundles, err := api.ListBundles(ctx)
		if err != nil {
			return v, fmt.Errorf("list bundles: %w", err)
		}
		for _, b := range bundles {
			v.Bundles = append(v.Bundles, b.GetBundle())
		}
	}
	migs, err := api.ListMigrations(ctx, "")
	if err != nil {
		return v, fmt.Errorf("list migrations: %w", err)
	}
	v.Migrations = migs
	for _, m := range migs {
		if !terminal(m.GetPhase()) {
			if v.Migrating == nil {
				v.Migrating = map[string]bool{}
			}
			v.Migrating[m.GetSourceJobId()] = true
		}
	}
	return v, nil
}

// read fetches the whole View a full pass decides on.
func (a *AutoManager) read(ctx context.Context) (View, error) {
	return readView(ctx, a.cfg.API)
}

// actsFailed is a pass whose reads succeeded and some of whose calls
// failed: the mirror is sound, and what failed is read again next pass.
type actsFailed struct{ err error }

func (e actsFailed) Error() string { return e.err.Error() }
func (e actsFailed) Unwrap() error { return e.err }

// holds copies the elastic tiers on hold.
func (a *AutoManager) holds() map[string]time.Time {
	a.holdMu.Lock()
	defer a.holdMu.Unlock()
	out := make(map[string]time.Time, len(a.hold))
	for t, until := range a.hold {
		out[t] = until
	}
	return out
}

// prefetches copies when spares were last asked to prefetch which images,
// forgetting what is old enough to be asked again (View.Prefetched).
func (a *AutoManager) prefetches() map[string]time.Time {
	a.prefetchMu.Lock()
	defer a.prefetchMu.Unlock()
	out := make(map[string]time.Time, len(a.prefetched))
	for k, at := range a.prefetched {
		if a.cfg.Clock.Now().Sub(at) >= SpareRefetchAfter {
			delete(a.prefetched, k)
			continue
		}
		out[k] = at
	}
	return out
}

// fill fetches the histories and the lease status Plan asked for.
func (a *AutoManager) fill(ctx context.Context, v *View, d Decision) error {
	if d.NeedLeases {
		ls, err := a.cfg.API.GetLeaseStatus(ctx)
		if err != nil {
			return fmt.Errorf("lease status: %w", err)
		}
		v.Leases = ls
	}
	need := map[string]bool{}
	for _, id := range d.NeedHistory {
		need[id] = true
	}
	var mu sync.Mutex
	var errs []error
	var read []*managerv1.JobWithHistory
	a.parallel(len(v.Jobs), func(i int) {
		if !need[v.Jobs[i].GetJob().GetJobId()] {
			return
		}
		jh, err := a.cfg.API.JobById(ctx, v.Jobs[i].GetJob().GetJobId())
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, norsk.ErrNotFound):
			// Deleted since the list: nothing to decide.
		case err != nil:
			errs = append(errs, err)
		default:
			v.Jobs[i] = jh
			read = append(read, jh)
		}
	})
	// What was read is newer than the mirror's: the mirror takes it, so
	// that the room the placement state gives these jobs is what the view
	// says they hold.
	for _, jh := range read {
		a.mirror.putJob(jh)
	}
	if len(errs) > 0 {
		return fmt.Errorf("job histories: %w", errors.Join(errs...))
	}
	return nil
}

// act makes the decision's calls: the starts as StartJobs plans of up to
// StartBatch each (one store write apiece), the rest at most Parallel at
// once. A call that fails is logged; the next pass decides again from what
// the store holds.
func (a *AutoManager) act(ctx context.Context, d Decision) error {
	var starts, rest []Action
	for _, act := range d.Actions {
		if act.Kind == ActStart {
			starts = append(starts, act)
		} else {
			rest = append(rest, act)
		}
	}
	var batches [][]Action
	for len(starts) > 0 {
		n := min(len(starts), StartBatch)
		batches = append(batches, starts[:n])
		starts = starts[n:]
	}
	var mu sync.Mutex
	var errs []error
	note := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	a.parallel(len(batches), func(i int) { note(a.start(ctx, batches[i])) })
	a.parallel(len(rest), func(i int) { note(a.do(ctx, rest[i])) })
	return errors.Join(errs...)
}

// start commits one batch of placements with StartJobs.
func (a *AutoManager) start(ctx context.Context, acts []Action) error {
	starts := make([]norsk.Start, len(acts))
	for i, act := range acts {
		starts[i] = norsk.Start{JobID: act.JobID, Role: act.Role, NodeID: act.NodeID, Options: norsk.StartJobOptions{Placement: act.Placement, RuntimeRole: act.RuntimeRole}}
	}
	out, err := a.cfg.API.StartJobs(ctx, starts)
	if err != nil {
		return fmt.Errorf("place %d instances: %w", len(acts), err)
	}
	var errs []error
	for i, r := range out {
		act := acts[i]
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("place %s/%s on %s: %w", act.JobID, act.Role, act.NodeID, r.Err))
			continue
		}
		a.placed(act, r.FencingToken)
	}
	return errors.Join(errs...)
}

// placed logs and counts one committed placement.
func (a *AutoManager) placed(act Action, tok uint64) {
	kind := act.Placement.GetKind()
	if m := a.cfg.Metrics; m != nil {
		m.Placements.WithLabelValues(kind).Inc()
		if !a.passStart.IsZero() {
			m.PlacementSeconds.WithLabelValues(kind).Observe(a.cfg.Clock.Now().Sub(a.passStart).Seconds())
		}
		if kind == "recovery" {
			why := "failed"
			if strings.Contains(act.Placement.GetFailure(), "node") { // "its node is gone", node_stopped, node_terminated
				why = "nodeLost"
			}
			m.Restarts.WithLabelValues(why).Inc()
		}
	}
	if kind == "recovery" {
		a.log.Info("recovered", "job", act.JobID, "role", act.Role, "node", act.NodeID, "token", tok,
			"failedNode", act.Placement.GetFailedNodeId(), "failure", act.Placement.GetFailure(),
			"failures", act.Placement.GetFailures(), "ceiling", act.Placement.GetCeiling())
	} else {
		a.log.Info("placed", "job", act.JobID, "role", act.Role, "node", act.NodeID, "token", tok, "summary", act.Placement.GetSummary())
	}
}

func (a *AutoManager) do(ctx context.Context, act Action) error {
	api := a.cfg.API
	m := a.cfg.Metrics
	switch act.Kind {
	case ActStart:
		tok, err := api.StartJob(ctx, act.JobID, act.Role, act.NodeID, norsk.StartJobOptions{Placement: act.Placement, RuntimeRole: act.RuntimeRole})
		if err != nil {
			return fmt.Errorf("place %s/%s on %s: %w", act.JobID, act.Role, act.NodeID, err)
		}
		a.placed(act, tok)
	case ActProvision:
		id, where, err := a.provision(ctx, act)
		if err != nil {
			a.holdMu.Lock()
			a.hold[act.Pool] = a.cfg.Clock.Now().Add(ProvisionHoldAfterFailure)
			a.holdMu.Unlock()
			return fmt.Errorf("create a node in elastic tier %s (%s): %w", act.Pool, act.Reason, err)
		}
		a.changes.actedOnNode(id)
		if m != nil {
			m.Provisioned.Inc()
		}
		a.log.Info("creating a node", "node", id, "tier", act.Pool, "provider", act.Provider, "on", where, "why", act.Reason)
	case ActProvisionSpare:
		id, where, err := a.provision(ctx, act)
		if err != nil {
			a.holdMu.Lock()
			a.hold[act.Pool] = a.cfg.Clock.Now().Add(ProvisionHoldAfterFailure)
			a.holdMu.Unlock()
			return fmt.Errorf("create a spare in elastic tier %s (%s): %w", act.Pool, act.Reason, err)
		}
		a.changes.actedOnNode(id)
		if m != nil {
			m.Provisioned.Inc()
		}
		a.log.Info("creating a spare", "node", id, "tier", act.Pool, "provider", act.Provider, "on", where, "why", act.Reason)
	case ActReleaseSpare:
		clear := map[string]string{placement.TagSpare: "", placement.TagWarmFor: "", placement.TagReservedFor: "", placement.TagExclusive: ""}
		if _, err := api.SetNodeTags(ctx, act.NodeID, clear); err != nil && !errors.Is(err, norsk.ErrNotFound) {
			return fmt.Errorf("release spare %s: %w", act.NodeID, err)
		}
		a.changes.actedOnNode(act.NodeID)
		a.log.Info("spare released", "node", act.NodeID, "why", act.Reason)
	case ActPrefetch:
		a.prefetchMu.Lock()
		a.prefetched[act.NodeID+"|"+strings.Join(act.Images, ",")] = a.cfg.Clock.Now()
		a.prefetchMu.Unlock()
		res, err := api.PrefetchImages(ctx, act.NodeID, act.Images)
		if err != nil {
			return fmt.Errorf("prefetch on spare %s: %w", act.NodeID, err)
		}
		a.log.Info("warming a spare", "node", act.NodeID, "images", act.Images, "request", res.GetRequestId(), "why", act.Reason)
	case ActMarkFailed:
		if err := api.MarkJobFailed(ctx, act.JobID, act.Reason); err != nil {
			return fmt.Errorf("mark %s failed: %w", act.JobID, err)
		}
		if m != nil {
			m.Failed.Inc()
		}
		a.log.Warn("job failed for good", "job", act.JobID, "reason", act.Reason)
	case ActDeleteBundle:
		if err := api.DeleteBundle(ctx, act.BundleID); err != nil && !errors.Is(err, norsk.ErrNotFound) {
			return fmt.Errorf("delete bundle %s: %w", act.BundleID, err)
		}
		a.log.Info("deleting bundle", "bundle", act.BundleID, "reason", act.Reason)
	case ActStop:
		if err := api.StopJob(ctx, act.JobID, act.Role, act.NodeID, norsk.StopJobOptions{}); err != nil {
			return fmt.Errorf("restart %s/%s: %w", act.JobID, act.Role, err)
		}
		a.log.Info("restarting for a new template", "bundle", act.BundleID, "job", act.JobID, "role", act.Role, "node", act.NodeID)
	case ActUpdateJob:
		if _, err := api.UpdateJob(ctx, proto.Clone(act.Job).(*managerv1.Job)); err != nil {
			return fmt.Errorf("roll bundle %s onto %s: %w", act.BundleID, act.JobID, err)
		}
		a.log.Info("rolled bundle template", "bundle", act.BundleID, "job", act.JobID)
	case ActRepair:
		// Make-before-break: the overlap strategy runs the new copy before
		// the old one stops; the target is pinned to the node this pass
		// found, and the saga refuses it if it no longer improves things.
		st, err := a.saga.MigrateJob(ctx, act.JobID, MigrateOptions{
			TargetNodeID: act.NodeID, Strategy: stratOverlap, SourceRole: act.Role,
			RequestedBy: repairRequester, Repair: true, Reason: act.Reason,
		})
		if m != nil {
			m.RepairsStarted.Inc()
		}
		switch {
		case apierr.CodeOf(err) == apierr.Aborted:
			// Started and rolled back (the target no longer fits or
			// improves things): the record keeps why, and the bundle's
			// interval keeps it from being retried at once.
			a.log.Warn("a repair was rolled back", "bundle", act.BundleID, "job", act.JobID, "to", act.NodeID, "err", err)
			return nil
		case err != nil:
			return fmt.Errorf("repair bundle %s: migrate %s/%s to %s: %w", act.BundleID, act.JobID, act.Role, act.NodeID, err)
		}
		a.log.Info("repairing a degraded anti-affinity", "bundle", act.BundleID, "job", act.JobID, "role", act.Role,
			"to", act.NodeID, "migration", st.GetMigrationId(), "why", act.Reason)
	}
	return nil
}

// report logs each instance that fits nowhere once per change of its
// summary, and sets the unplaced and degraded gauges. scope names the jobs
// the decision covered (nil: all); what was known of the others stands.
func (a *AutoManager) report(v View, d Decision, scope map[string]bool) {
	prev := a.unplaced
	now := make(map[[2]string]string, len(d.Unplaced))
	if scope != nil {
		for key, s := range prev {
			if !scope[key[0]] {
				now[key] = s
			}
		}
		for _, b := range v.Bundles {
			delete(a.degraded, b.GetBundleId())
		}
	} else {
		a.degraded = map[string]int{}
	}
	for _, u := range d.Unplaced {
		key := [2]string{u.JobID, u.Role}
		now[key] = u.Summary
		if prev[key] != u.Summary {
			a.log.Warn("cannot place", "job", u.JobID, "role", u.Role, "summary", u.Summary)
		}
	}
	a.unplaced = now
	degraded := 0
	for b, n := range d.degradedBundles {
		a.degraded[b] = n
	}
	for _, n := range a.degraded {
		degraded += n
	}
	if d.sparesDecided {
		for tier, why := range d.SparesBlocked {
			if a.sparesBlocked[tier] != why {
				a.log.Warn("cannot create this tier's spares", "tier", tier, "why", why)
			}
		}
		for tier := range a.sparesBlocked {
			if _, still := d.SparesBlocked[tier]; !still {
				a.log.Info("this tier's spares can be created again", "tier", tier)
			}
		}
		a.sparesBlocked = d.SparesBlocked
	}
	if m := a.cfg.Metrics; m != nil {
		m.Unplaced.Set(float64(len(now)))
		m.Degraded.Set(float64(degraded))
		if d.sparesDecided {
			m.SparesBlocked.Set(float64(len(d.SparesBlocked)))
		}
	}
}

// parallel runs f(0..n-1), at most Parallel at once.
func (a *AutoManager) parallel(n int, f func(i int)) {
	sem := make(chan struct{}, a.cfg.Parallel)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// MigrateJob starts a migration (see Saga.MigrateJob).
func (a *AutoManager) MigrateJob(ctx context.Context, jobID string, opts MigrateOptions) (*managerv1.MigrationState, error) {
	return a.saga.MigrateJob(ctx, jobID, opts)
}

// CancelMigration aborts an in-flight migration (see Saga.CancelMigration).
func (a *AutoManager) CancelMigration(ctx context.Context, migrationID, reason string) error {
	return a.saga.CancelMigration(ctx, migrationID, reason)
}

// Metrics are the AutoManager's Prometheus metrics.
type Metrics struct {
	Passes      prometheus.Counter
	PassSeconds prometheus.Histogram
	// PassJobs is how many jobs a pass planned; Reconciles (by why: start,
	// reconcile, failed, resync, burst) and ReconcileSeconds count and
	// time the full passes (read and plan).
	PassJobs         prometheus.Histogram
	Reconciles       *prometheus.CounterVec
	ReconcileSeconds prometheus.Histogram
	Placements       *prometheus.CounterVec
	Failed           prometheus.Counter
	Unplaced         prometheus.Gauge
	SparesBlocked    prometheus.Gauge
	Provisioned      prometheus.Counter

	MigrationsStarted       *prometheus.CounterVec
	MigrationsEnded         *prometheus.CounterVec
	MigrationDispatchFailed prometheus.Counter

	Degraded       prometheus.Gauge
	RepairsStarted prometheus.Counter

	// Node drains (drain.go): the items of the running drains by node and
	// result, and the drains ended by their outcome.
	DrainItems  *prometheus.GaugeVec
	DrainsEnded *prometheus.CounterVec

	// PlacementSeconds times each placement (kind) from the read of the
	// pass that found the instance needing a node to its binding's commit.
	PlacementSeconds *prometheus.HistogramVec
	// MigrationSeconds and MigrationPhaseSeconds time each ended
	// migration, whole and per phase, by strategy (and outcome / phase).
	MigrationSeconds      *prometheus.HistogramVec
	MigrationPhaseSeconds *prometheus.HistogramVec
	// Restarts counts instances started again after they failed or their
	// node was lost (recovery placements), by the failure's kind.
	Restarts *prometheus.CounterVec
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Passes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "automanager", Name: "passes_total",
			Help: "Decision passes made."}),
		PassSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "norsk", Subsystem: "automanager", Name: "pass_seconds",
			Help: "Time a pass takes (read, decide, act).", Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}),
		PassJobs: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "norsk", Subsystem: "automanager", Name: "pass_jobs",
			Help:    "Jobs a pass planned (a full pass: every job; otherwise those the events touched and those pending).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10)}),
		Reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "automanager", Name: "reconciles_total",
			Help: "Full passes made (every job, node, bundle and migration read and planned), by why: start, reconcile (the timer), failed (the pass before failed), resync (the event stream was cut or resynced), burst (out of process, a burst touched much of the store)."},
			[]string{"reason"}),
		ReconcileSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "norsk", Subsystem: "automanager", Name: "reconcile_seconds",
			Help: "Time a full pass takes (read everything, decide, act).", Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}),
		Placements: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "automanager", Name: "placements_total",
			Help: "Instances bound, by kind (first, recovery)."}, []string{"kind"}),
		Failed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "automanager", Name: "jobs_failed_total",
			Help: "Jobs ended with MarkJobFailed at the restart ceiling."}),
		Unplaced: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "norsk", Subsystem: "automanager", Name: "unplaced_instances",
			Help: "Instances that need a node and fit none now."}),
		SparesBlocked: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "norsk", Subsystem: "automanager", Name: "spare_tiers_blocked",
			Help: "Tiers with spares configured whose spares cannot be created now (the log says why)."}),
		Provisioned: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "automanager", Name: "nodes_requested_total",
			Help: "Elastic nodes the AutoManager asked a provider to create because nothing fit."}),
	}
	m.MigrationsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "automanager", Name: "migrations_started_total",
		Help: "Migrations started, by strategy."}, []string{"strategy"})
	m.MigrationsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "automanager", Name: "migrations_ended_total",
		Help: "Migrations ended, by outcome (done, aborted)."}, []string{"outcome"})
	m.MigrationDispatchFailed = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "automanager", Name: "migration_dispatch_failures_total",
		Help: "Migration targets whose start was refused."})
	m.Degraded = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "norsk", Subsystem: "automanager", Name: "degraded_instances",
		Help: "Running bundle instances whose node breaks a FORBID anti-affinity rule of their bundle."})
	m.RepairsStarted = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "automanager", Name: "repairs_started_total",
		Help: "Migrations started to repair a degraded anti-affinity (their outcomes count in migrations_ended_total)."})
	m.DrainItems = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "norsk", Subsystem: "automanager", Name: "drain_items",
		Help: "The instances of each running node drain, by node and result (pending, moving, moved, failed, skipped, stopped, gone)."}, []string{"node", "result"})
	m.DrainsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "automanager", Name: "drains_ended_total",
		Help: "Node drains the AutoManager ended, by outcome (drained, notDrained)."}, []string{"outcome"})
	for _, o := range []string{"drained", "notDrained"} {
		m.DrainsEnded.WithLabelValues(o)
	}
	m.PlacementSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "norsk", Subsystem: "automanager", Name: "placement_seconds",
		Help:    "Per placement: from the read of the pass that found the instance needing a node to the commit of its binding, by kind (first, recovery).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"kind"})
	migBuckets := []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	m.MigrationSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "norsk", Subsystem: "automanager", Name: "migration_seconds",
		Help: "Ended migrations' duration, from start to done or aborted, by strategy and outcome.", Buckets: migBuckets}, []string{"strategy", "outcome"})
	m.MigrationPhaseSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "norsk", Subsystem: "automanager", Name: "migration_phase_seconds",
		Help: "Time ended migrations spent in each phase, by strategy and phase.", Buckets: migBuckets}, []string{"strategy", "phase"})
	m.Restarts = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "automanager", Name: "instance_restarts_total",
		Help: "Instances started again by recovery after they failed or their node was lost, by why (failed, nodeLost)."}, []string{"why"})
	for _, k := range []string{"first", "recovery", "restart", "migration", "repair"} {
		m.Placements.WithLabelValues(k)
		m.PlacementSeconds.WithLabelValues(k)
	}
	for _, st := range []managerv1.MigrationStrategy{stratStopThenStart, stratOverlap, stratHandover} {
		m.MigrationsStarted.WithLabelValues(StrategyName(st))
		for _, o := range []string{"done", "aborted"} {
			m.MigrationSeconds.WithLabelValues(StrategyName(st), o)
		}
	}
	for _, o := range []string{"done", "aborted"} {
		m.MigrationsEnded.WithLabelValues(o)
	}
	for _, why := range fullReasons {
		m.Reconciles.WithLabelValues(why)
	}
	for _, w := range []string{"failed", "nodeLost"} {
		m.Restarts.WithLabelValues(w)
	}
	if reg != nil {
		reg.MustRegister(m.Passes, m.PassSeconds, m.PassJobs, m.Reconciles, m.ReconcileSeconds, m.Placements, m.Failed, m.Unplaced, m.SparesBlocked, m.Provisioned,
			m.MigrationsStarted, m.MigrationsEnded, m.MigrationDispatchFailed, m.Degraded, m.RepairsStarted,
			m.DrainItems, m.DrainsEnded, m.PlacementSeconds, m.MigrationSeconds, m.MigrationPhaseSeconds, m.Restarts)
	}
	return m
}

// policy is the policy of a pass: Policy with the elastic tiers of now.
func (a *AutoManager) policy() Policy {
	p := a.cfg.Policy
	if a.cfg.Elastic != nil {
		p.Elastic = a.cfg.Elastic()
	}
	return p
}

// provision creates the node an ActProvision asks for, through the
// provider's own call (the seed's createAwsNode, createOciNode; the mock
// provider's createMockNode). It returns the node and where it runs.
func (a *AutoManager) provision(ctx context.Context, act Action) (string, string, error) {
	api := a.cfg.API
	switch {
	case act.Provider == "mock":
		return api.CreateMockNode(ctx, norsk.MockNode{Pool: act.Pool, Tags: act.Tags})
	case act.Type == nil:
		return "", "", fmt.Errorf("provider %q: no instance type chosen", act.Provider)
	case act.Provider == "aws":
		t := act.Type
		n, err := api.CreateAwsNode(ctx, norsk.AwsNode{Pool: act.Pool, Tags: act.Tags, Region: t.Region, InstanceType: t.Name, AvailabilityZone: t.Zone,
			SecurityGroupLabels: t.SecurityGroups, Subnet: t.Subnet, FallbackInstanceTypes: t.Fallbacks})
		if err != nil {
			return "", "", err
		}
		return n.GetNodeId(), n.GetInstanceId() + " (" + n.GetInstanceType() + ")", nil
	case act.Provider == "oci":
		t := act.Type
		n, err := api.CreateOciNode(ctx, norsk.OciNode{Pool: act.Pool, Tags: act.Tags, Region: t.Region, Shape: t.Name, AvailabilityDomain: t.Zone,
			Subnet: t.Subnet, FallbackShapes: t.Fallbacks, OCPUs: t.OCPUs, MemoryGBs: t.MemoryGBs})
		if err != nil {
			return "", "", err
		}
		return n.GetNodeId(), n.GetInstanceId() + " (" + n.GetInstanceType() + ")", nil
	case act.Provider == "cloud-hypervisor":
		t := act.Type
		n, err := api.CreateCloudHypervisorNode(ctx, norsk.CloudHypervisorNode{Pool: act.Pool, Tags: act.Tags, Host: t.Region, Shape: t.Name})
		if err != nil {
			return "", "", err
		}
		return n.GetNodeId(), n.GetInstanceId() + " (" + n.GetInstanceType() + ")", nil
	}
	return "", "", fmt.Errorf("provider %q cannot create nodes from the AutoManager", act.Provider)
}

// observeMigration times an ended migration, whole and per phase.
func (m *Metrics) observeMigration(st *managerv1.MigrationState, outcome string) {
	strategy := StrategyName(st.GetStrategy())
	hist := st.GetPhaseHistory()
	if st.GetStartedAt() != nil && len(hist) > 0 {
		m.MigrationSeconds.WithLabelValues(strategy, outcome).Observe(max(hist[len(hist)-1].GetAt().AsTime().Sub(st.GetStartedAt().AsTime()).Seconds(), 0))
	}
	for i := 0; i+1 < len(hist); i++ {
		d := hist[i+1].GetAt().AsTime().Sub(hist[i].GetAt().AsTime())
		m.MigrationPhaseSeconds.WithLabelValues(strategy, PhaseName(hist[i].GetPhase())).Observe(max(d.Seconds(), 0))
	}
}
