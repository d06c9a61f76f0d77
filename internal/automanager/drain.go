package automanager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// drainRequester is recorded as who asked for a drain's migrations.
func drainRequester(d *managerv1.NodeDrain) string {
	if d.GetRequestedBy() != "" {
		return "drain of node " + d.GetNodeId() + " (" + d.GetRequestedBy() + ")"
	}
	return "drain of node " + d.GetNodeId()
}

// Drains advances every running node drain of v one step: it lists what
// runs on the node, starts migrations (at most the drain's parallel at
// once), follows them, retries a failed one, and when the deadline has
// passed aborts what is moving and stops what is left, recording the
// drain's progress at each step (RecordNodeDrain). It is the one entry
// point the reconcile pass calls; its work is in proportion to the running
// drains (none: nothing is indexed). It returns when a drain next needs a
// step with no event (zero: none).
func (a *AutoManager) Drains(ctx context.Context, v View) (time.Time, error) {
	var running []*managerv1.NodeDrain
	for _, n := range v.Nodes {
		if n.GetDrain().GetState() == drainRunning {
			running = append(running, n.GetDrain())
		}
	}
	if m := a.cfg.Metrics; m != nil && m.DrainItems != nil {
		m.setDrains(running)
	}
	if len(running) == 0 {
		return time.Time{}, nil
	}
	in := newDrainInput(v, a.cfg.Clock.Now())
	var next time.Time
	var errs []error
	for _, d := range running {
		at, err := a.drainStep(ctx, d, in)
		if err != nil {
			errs = append(errs, fmt.Errorf("drain of node %s: %w", d.GetNodeId(), err))
		}
		if !at.IsZero() {
			next = earliest(next, at)
		}
	}
	if len(errs) > 0 {
		return next, fmt.Errorf("%d drain(s) could not step: %w", len(errs), errs[0])
	}
	return next, nil
}

// drainStep plans one step of d, makes its calls and records the result.
func (a *AutoManager) drainStep(ctx context.Context, d *managerv1.NodeDrain, in drainInput) (time.Time, error) {
	p := planDrain(d, in)
	nd := p.Drain
	now := in.Now
	log := a.log.With("node", nd.GetNodeId(), "drain", nd.GetRevision())
	var mu sync.Mutex
	a.parallel(len(p.Migrate), func(k int) {
		it := nd.GetItems()[p.Migrate[k]]
		st, err := a.saga.MigrateJob(ctx, it.GetJobId(), MigrateOptions{
			Strategy: nd.GetStrategy(), SourceRole: it.GetRole(), RequestedBy: drainRequester(nd),
			Reason: "drain of node " + nd.GetNodeId(),
		})
		mu.Lock()
		defer mu.Unlock()
		it.Attempts++
		switch {
		case err == nil:
			it.Result, it.MigrationId, it.Reason, it.RetryAt = drainMoving, st.GetMigrationId(), "", nil
			it.TargetNodeId = st.GetTargetNodeId()
			log.Info("drain: moving", "job", it.GetJobId(), "role", it.GetRole(), "to", st.GetTargetNodeId(), "migration", st.GetMigrationId())
		case nd.GetDeadline() == nil && it.GetAttempts() >= DrainMaxAttempts:
			it.Result, it.Reason = drainFailed, fmt.Sprintf("%s (gave up after %d attempts)", errorText(err), it.GetAttempts())
			it.RetryAt, it.EndedAt = nil, timestamppb.New(now)
			log.Warn("drain: gave up moving", "job", it.GetJobId(), "role", it.GetRole(), "err", err)
		default:
			if st != nil {
				it.MigrationId = st.GetMigrationId()
			}
			it.Reason = errorText(err)
			it.RetryAt = timestamppb.New(now.Add(drainRetryAfter(it.GetAttempts())))
			log.Warn("drain: move failed; will retry", "job", it.GetJobId(), "role", it.GetRole(), "retryIn", drainRetryAfter(it.GetAttempts()), "err", err)
		}
		p.Changed = true
	})
	for _, idx := range p.Cancel {
		it := nd.GetItems()[idx]
		if err := a.saga.CancelMigration(ctx, it.GetMigrationId(), "the drain of node "+nd.GetNodeId()+" reached its deadline"); err != nil {
			log.Debug("drain: deadline: migration not aborted", "migration", it.GetMigrationId(), "err", err)
		}
	}
	reason := fmt.Sprintf("drain of node %s: its deadline (%s) passed before the job could be moved", nd.GetNodeId(), nd.GetDeadline().AsTime().Format(time.RFC3339))
	a.parallel(len(p.Stop), func(k int) {
		it := nd.GetItems()[p.Stop[k]]
		err := a.cfg.API.StopJob(ctx, it.GetJobId(), it.GetRole(), nd.GetNodeId(), norsk.StopJobOptions{Reason: reason})
		mu.Lock()
		defer mu.Unlock()
		if err != nil && !norskNotFound(err) {
			it.Reason = "the deadline passed; stopping it failed: " + errorText(err)
			log.Warn("drain: deadline: stop failed", "job", it.GetJobId(), "role", it.GetRole(), "err", err)
		} else {
			it.Result, it.Reason, it.RetryAt, it.EndedAt = drainStopped, reason, nil, timestamppb.New(now)
			log.Warn("drain: deadline: stopped", "job", it.GetJobId(), "role", it.GetRole())
		}
		p.Changed = true
	})
	if finishDrain(nd) {
		p.Changed = true
	}
	if !p.Changed {
		return p.NextAt, nil
	}
	if _, err := a.cfg.API.RecordNodeDrain(ctx, nd, d.GetRevision()); err != nil {
		// Undone or moved meanwhile: the next pass reads it again. The
		// migrations started are in the store; the next step adopts them.
		return p.NextAt, fmt.Errorf("record progress: %w", err)
	}
	if nd.GetState() != drainRunning {
		log.Info("drain ended", "state", norsk.DrainStateName(nd.GetState()), "summary", summaryOf(nd))
		if m := a.cfg.Metrics; m != nil && m.DrainsEnded != nil {
			m.DrainsEnded.WithLabelValues(norsk.DrainStateName(nd.GetState())).Inc()
		}
	}
	for _, it := range nd.GetItems() {
		if it.GetResult() == drainPending && it.GetRetryAt() != nil {
			p.NextAt = earliest(p.NextAt, it.GetRetryAt().AsTime())
		}
	}
	return p.NextAt, nil
}

// norskNotFound: the call found no such thing.
func norskNotFound(err error) bool {
	return errors.Is(err, norsk.ErrNotFound) || apierr.CodeOf(err) == apierr.NotFound
}

// summaryOf is the drain's one-line summary as the store words it.
func summaryOf(d *managerv1.NodeDrain) string {
	counts := map[managerv1.DrainItemResult]int{}
	for _, it := range d.GetItems() {
		counts[it.GetResult()]++
	}
	return fmt.Sprintf("%d/%d moved, %d failed, %d skipped, %d stopped", counts[drainMoved]+counts[drainGone], len(d.GetItems()),
		counts[drainFailed], counts[drainSkipped], counts[drainStopped])
}

// setDrains sets the drain gauges to the running drains (a few at most:
// the work is in proportion to them).
func (m *Metrics) setDrains(running []*managerv1.NodeDrain) {
	m.DrainItems.Reset()
	for _, d := range running {
		counts := map[managerv1.DrainItemResult]int{}
		for _, it := range d.GetItems() {
			counts[it.GetResult()]++
		}
		for r := range managerv1.DrainItemResult_name {
			if r == 0 {
				continue
			}
			res := managerv1.DrainItemResult(r)
			m.DrainItems.WithLabelValues(d.GetNodeId(), norsk.DrainItemResultName(res)).Set(float64(counts[res]))
		}
	}
}
