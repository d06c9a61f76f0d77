package providers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Node states, short.
const (
	nodeStarting   = managerv1.NodeState_NODE_STATE_STARTING
	nodeOnline     = managerv1.NodeState_NODE_STATE_ONLINE
	nodeLost       = managerv1.NodeState_NODE_STATE_LOST
	nodeTerminated = managerv1.NodeState_NODE_STATE_TERMINATED
)

// callTimeout bounds one provider call of the term's loops.
const callTimeout = 30 * time.Second

// Run is the fleet's part of one primary term; it returns when ctx ends
// (the term is over). It runs
//
//   - the empty-node reaper, every ReaperInterval: it terminates an elastic
//     node online with no instance for its effective idle expiry (the
//     node's override, else DefaultIdleExpiry), one still starting after
//     its provider's start timeout, and one lost for longer than its idle
//     expiry. Idleness is measured from what this term has seen (never from
//     before the node's last state change), so a new primary never reaps a
//     node sooner than the old one would have;
//   - for each provider, a loop that ends the instances of terminated
//     nodes (once per node per term, retried on failure), pushes changed
//     node tags to their instances and, at once and every
//     ReconcileInterval, reconciles: see reconcile.
func (f *Fleet) Run(ctx context.Context) {
	if f.reg.Empty() {
		return
	}
	var wg sync.WaitGroup
	for _, name := range f.reg.Names() {
		p, _ := f.reg.Provider(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.runProvider(ctx, p)
		}()
	}
	f.runReaper(ctx)
	wg.Wait()
}

func (f *Fleet) runReaper(ctx context.Context) {
	clk := f.cfg.Clock
	idleSince := map[string]time.Time{}
	for {
		t := clk.NewTimer(f.cfg.ReaperInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		f.reap(ctx, clk.Now(), idleSince)
	}
}

// startTimeout is the start timeout of provider's nodes.
func (f *Fleet) startTimeout(provider string) time.Duration {
	if p, ok := f.reg.Provider(provider); ok {
		if st, ok := p.(StartTimeouter); ok && st.StartTimeout() > 0 {
			return st.StartTimeout()
		}
	}
	return f.cfg.StartTimeout
}

func (f *Fleet) reap(ctx context.Context, now time.Time, idleSince map[string]time.Time) {
	seen := map[string]bool{}
	for _, v := range f.cfg.Backend.Nodes() {
		n := v.Node
		if !n.GetElastic() {
			continue
		}
		id := n.GetNodeId()
		seen[id] = true
		expiry := f.cfg.DefaultIdleExpiry
		if ms := n.GetIdleExpiryMs(); ms > 0 {
			// Clamped: an override stored before SetNodeIdleExpiry was
			// bounded must not overflow into a negative expiry.
			expiry = time.Duration(min(ms, MaxIdleExpiry.Milliseconds())) * time.Millisecond
		}
		since := n.GetStateSince().AsTime()
		switch n.GetState() {
		case nodeStarting:
			if to := f.startTimeout(n.GetProvider()); to > 0 && now.Sub(since) >= to && !f.inFlight(id) {
				f.terminateNode(ctx, n, false, "start_timeout", fmt.Sprintf("startup time exceeded: its worker did not call in within %s", to))
			}
		case nodeOnline:
			if v.Busy || n.GetTags()["spare"] == "true" {
				// A warm spare is kept empty on purpose: the AutoManager's
				// reconciler, not the reaper, decides its end.
				delete(idleSince, id)
				continue
			}
			at, ok := idleSince[id]
			if !ok || at.Before(since) {
				at = now
				if since.After(at) {
					at = since
				}
				idleSince[id] = at
			}
			if now.Sub(at) >= expiry {
				f.terminateNode(ctx, n, true, "idle", fmt.Sprintf("idle for %s (idle expiry %s)", now.Sub(at).Round(time.Second), expiry))
			}
		case nodeLost:
			if now.Sub(since) >= expiry {
				f.terminateNode(ctx, n, false, "lost", fmt.Sprintf("lost for %s (idle expiry %s)", now.Sub(since).Round(time.Second), expiry))
			}
		}
	}
	for id := range idleSince {
		if !seen[id] {
			delete(idleSince, id)
		}
	}
}

// terminateNode terminates an elastic node (onlyIfIdle: refused if an
// instance was bound to it meanwhile, which is not an error). Its
// instance is ended once the node is terminated (runProvider).
func (f *Fleet) terminateNode(ctx context.Context, n *managerv1.Node, onlyIfIdle bool, kind, why string) {
	_, err := f.cfg.Backend.Apply(WithActor(ctx, "empty-node-reaper", "reap"), &storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{
		NodeId: n.GetNodeId(), OnlyIfIdle: onlyIfIdle, Reason: why,
	}}})
	switch {
	case err == nil:
		f.cfg.Metrics.Reaped.WithLabelValues(kind).Inc()
		f.log.Info("empty-node reaper: terminating an elastic node", "node", n.GetNodeId(), "provider", n.GetProvider(), "why", why)
	case apierr.Is(err, apierr.FailedPrecondition):
		f.log.Debug("empty-node reaper: node no longer idle", "node", n.GetNodeId(), "err", err)
	default:
		f.log.Warn("empty-node reaper: terminate failed; retrying next round", "node", n.GetNodeId(), "err", err)
	}
}

// providerTerm is one provider's loop state for a term.
type providerTerm struct {
	p Provider
	// ended are the terminated nodes whose instance this term ended (or
	// found gone); retryAt holds back a failed one.
	ended   map[string]bool
	retryAt map[string]time.Time
	// tags are the node tags last seen (and pushed) per node.
	tags map[string]map[string]string
	// resumed are the nodes whose launch this term repeated.
	resumed map[string]bool
	wg      sync.WaitGroup
}

func (f *Fleet) runProvider(ctx context.Context, p Provider) {
	pt := &providerTerm{p: p, ended: map[string]bool{}, retryAt: map[string]time.Time{}, tags: map[string]map[string]string{}, resumed: map[string]bool{}}
	defer pt.wg.Wait()
	clk := f.cfg.Clock
	// Tags as the term finds them are taken as pushed: reconciliation
	// compares them with the instances'.
	for _, v := range f.cfg.Backend.Nodes() {
		if v.Node.GetProvider() == p.Name() {
			pt.tags[v.Node.GetNodeId()] = maps.Clone(v.Node.GetTags())
		}
	}
	f.reconcile(ctx, pt)
	nextReconcile := clk.Now().Add(f.cfg.ReconcileInterval)
	for {
		t := clk.NewTimer(f.cfg.ReaperInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		f.endTerminated(ctx, pt)
		f.pushTags(ctx, pt)
		if now := clk.Now(); !now.Before(nextReconcile) {
			f.reconcile(ctx, pt)
			nextReconcile = now.Add(f.cfg.ReconcileInterval)
		}
	}
}

// endTerminated ends the instances of this provider's terminated nodes.
func (f *Fleet) endTerminated(ctx context.Context, pt *providerTerm) {
	now := f.cfg.Clock.Now()
	for _, v := range f.cfg.Backend.Nodes() {
		n := v.Node
		id := n.GetNodeId()
		if n.GetProvider() != pt.p.Name() || n.GetState() != nodeTerminated || n.GetProviderInstance() == "" || pt.ended[id] || now.Before(pt.retryAt[id]) {
			continue
		}
		ref := Ref{ID: n.GetProviderInstance(), Region: n.GetCloud().GetRegion(), NodeID: id}
		if err := f.endInstance(ctx, pt.p, ref); err != nil {
			pt.retryAt[id] = now.Add(f.cfg.ReconcileInterval)
			f.log.Warn("could not terminate a terminated node's instance; retrying", "node", id, "provider", pt.p.Name(), "instance", ref.ID, "err", err)
			continue
		}
		pt.ended[id] = true
		delete(pt.retryAt, id)
	}
}

// endInstance terminates one instance (gone already: done).
func (f *Fleet) endInstance(ctx context.Context, p Provider, ref Ref) error {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err := f.cfg.Throttle.retry(cctx, f.cfg.Clock, func() error { return p.Terminate(cctx, ref) })
	if err != nil && !errors.Is(err, ErrNotFound) {
		if errors.Is(err, ErrThrottled) {
			f.cfg.Metrics.Throttled.WithLabelValues(p.Name()).Inc()
		}
		return err
	}
	f.log.Info("instance terminated", "provider", p.Name(), "instance", ref.ID, "node", ref.NodeID)
	return nil
}

// pushTags pushes node tags changed since the last look to the instances.
func (f *Fleet) pushTags(ctx context.Context, pt *providerTerm) {
	for _, v := range f.cfg.Backend.Nodes() {
		n := v.Node
		if n.GetProvider() != pt.p.Name() {
			continue
		}
		id := n.GetNodeId()
		if n.GetState() == nodeTerminated || n.GetProviderInstance() == "" {
			pt.tags[id] = maps.Clone(n.GetTags())
			continue
		}
		if maps.Equal(pt.tags[id], n.GetTags()) {
			continue
		}
		if err := f.setTags(ctx, pt.p, n, userTags(n.GetTags())); err != nil {
			f.log.Warn("could not push a node's tags to its instance; retrying", "node", id, "instance", n.GetProviderInstance(), "err", err)
			continue
		}
		pt.tags[id] = maps.Clone(n.GetTags())
	}
}

func (f *Fleet) setTags(ctx context.Context, p Provider, n *managerv1.Node, tags map[string]string) error {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err := f.cfg.Throttle.retry(cctx, f.cfg.Clock, func() error {
		return p.SetTags(cctx, Ref{ID: n.GetProviderInstance(), Region: n.GetCloud().GetRegion(), NodeID: n.GetNodeId()}, tags)
	})
	if err == nil {
		f.cfg.Metrics.Reconciled.WithLabelValues(p.Name(), "tags_pushed").Inc()
	}
	return err
}

// reconcile lists the provider's instances of this cluster and makes the
// node records and the instances agree:
//
//   - an instance with no node record, or whose node is terminated, is
//     terminated (a leak); so is a second instance of one node;
//   - a starting node whose launch was never recorded gets the instance
//     that carries its tag; one with none has its launch repeated (the
//     same client token: the cloud answers with the instance a failed
//     primary made, or makes the only one);
//   - for a Tracker, a live node whose instance is gone (terminated, or
//     missing from the list ListGrace after its launch) is marked
//     terminated with the reason;
//   - for a Tracker, node tags missing from the instance are pushed.
//
// Absence from the list counts only in a region the provider still runs
// (an overrides file that drops a region does not end its nodes).
//
// A failed listing concludes nothing.
func (f *Fleet) reconcile(ctx context.Context, pt *providerTerm) {
	p := pt.p
	cctx, cancel := context.WithTimeout(ctx, 2*callTimeout)
	var list []Instance
	err := f.cfg.Throttle.retry(cctx, f.cfg.Clock, func() error {
		var err error
		list, err = p.List(cctx, f.clusterID())
		return err
	})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			f.cfg.Metrics.ListErrors.WithLabelValues(p.Name()).Inc()
			f.log.Warn("reconciliation: could not list instances; skipped", "provider", p.Name(), "err", err)
		}
		return
	}
	now := f.cfg.Clock.Now()
	nodes := map[string]NodeView{}
	for _, v := range f.cfg.Backend.Nodes() {
		nodes[v.Node.GetNodeId()] = v
	}
	tracks := false
	if tr, ok := p.(Tracker); ok {
		tracks = tr.TracksInstances()
	}
	live := map[string]Instance{} // node → its live instance
	for _, inst := range list {
		if inst.Gone() {
			continue
		}
		v, known := nodes[inst.NodeID]
		n := v.Node
		switch {
		case !known || n.GetProvider() != p.Name():
			f.leak(ctx, p, inst, "it has no node record")
		case n.GetState() == nodeTerminated:
			if !pt.ended[n.GetNodeId()] {
				f.leak(ctx, p, inst, "its node is terminated ("+n.GetStateReason()+")")
			}
		case n.GetProviderInstance() == "":
			if _, dup := live[inst.NodeID]; dup {
				f.leak(ctx, p, inst, "another instance already serves its node")
				continue
			}
			live[inst.NodeID] = inst
			f.recordInstance(ctx, p, n, inst)
		case n.GetProviderInstance() != "" && n.GetProviderInstance() != inst.ID:
			f.leak(ctx, p, inst, "its node runs on "+n.GetProviderInstance())
		default:
			live[inst.NodeID] = inst
			if missing := missingTags(userTags(n.GetTags()), inst.Tags); tracks && len(missing) > 0 && n.GetProviderInstance() != "" {
				if err := f.setTags(ctx, p, n, missing); err != nil {
					f.log.Warn("reconciliation: could not push tags", "node", n.GetNodeId(), "err", err)
				}
			}
		}
	}
	gone := map[string]Instance{}
	for _, inst := range list {
		if inst.Gone() && inst.NodeID != "" {
			gone[inst.NodeID] = inst
		}
	}
	for id, v := range nodes {
		n := v.Node
		if n.GetProvider() != p.Name() || !n.GetElastic() || n.GetState() == nodeTerminated {
			continue
		}
		if _, ok := live[id]; ok {
			continue
		}
		if n.GetProviderInstance() == "" {
			if n.GetState() == nodeStarting && n.GetCloud() != nil && !f.inFlight(id) && !pt.resumed[id] {
				pt.resumed[id] = true
				f.resume(ctx, pt, v)
			}
			continue
		}
		if !tracks {
			continue
		}
		inst, ended := gone[id]
		launched := n.GetRegisteredAt().AsTime()
		if !ended && now.Sub(launched) < f.cfg.ListGrace {
			continue // not listed yet: clouds list eventually consistently
		}
		if cat, ok := p.(Catalog); ok && !ended && !slices.Contains(cat.Regions(), n.GetCloud().GetRegion()) {
			continue // a region no longer run is not listed: absence says nothing
		}
		why := fmt.Sprintf("its instance %s is gone", n.GetProviderInstance())
		if ended {
			why = fmt.Sprintf("its instance %s is %s", n.GetProviderInstance(), inst.State)
			if inst.StateReason != "" {
				why += " (" + inst.StateReason + ")"
			}
		}
		_, err := f.cfg.Backend.Apply(WithActor(ctx, "provider/"+p.Name(), "reconcile"), &storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{
			NodeId: id, Reason: why,
		}}})
		if err != nil {
			f.log.Warn("reconciliation: could not mark a node terminated", "node", id, "err", err)
			continue
		}
		pt.ended[id] = true
		f.cfg.Metrics.Reaped.WithLabelValues("instance_gone").Inc()
		f.cfg.Metrics.Reconciled.WithLabelValues(p.Name(), "node_gone").Inc()
		f.log.Warn("reconciliation: node terminated, its instance is gone", "node", id, "provider", p.Name(), "why", why)
	}
}

// leak terminates an instance no live node owns.
func (f *Fleet) leak(ctx context.Context, p Provider, inst Instance, why string) {
	if err := f.endInstance(ctx, p, Ref{ID: inst.ID, Region: inst.Region, NodeID: inst.NodeID}); err != nil {
		f.log.Warn("reconciliation: could not terminate a leaked instance", "provider", p.Name(), "instance", inst.ID, "node", inst.NodeID, "err", err)
		return
	}
	f.cfg.Metrics.Reconciled.WithLabelValues(p.Name(), "leak_terminated").Inc()
	f.log.Warn("reconciliation: terminated an instance no live node owns", "provider", p.Name(), "instance", inst.ID, "node", inst.NodeID, "why", why)
}

// recordInstance records the instance a starting node's launch made.
func (f *Fleet) recordInstance(ctx context.Context, p Provider, n *managerv1.Node, inst Instance) {
	ci := n.GetCloud()
	if ci == nil {
		ci = &managerv1.CloudInstance{}
	}
	ci = cloneCloud(ci)
	ci.Zone = firstNonEmpty(inst.Zone, ci.GetZone())
	ci.PrivateIp, ci.PublicIp, ci.PrivateDnsName = inst.PrivateIP, inst.PublicIP, inst.PrivateDNS
	if inst.Type != "" {
		ci.InstanceType = inst.Type
	}
	if _, err := f.cfg.Backend.Apply(WithActor(ctx, "provider/"+p.Name(), "reconcile"), &storev1.Command{Cmd: &storev1.Command_SetNodeInstance{SetNodeInstance: &storev1.SetNodeInstance{
		NodeId: n.GetNodeId(), ProviderInstance: inst.ID, Cloud: ci,
	}}}); err != nil {
		f.log.Warn("reconciliation: could not record a node's instance", "node", n.GetNodeId(), "instance", inst.ID, "err", err)
		return
	}
	f.cfg.Metrics.Reconciled.WithLabelValues(p.Name(), "instance_recorded").Inc()
	f.log.Info("reconciliation: recorded a node's instance", "node", n.GetNodeId(), "instance", inst.ID)
}

// resume repeats the launch of a starting node that has no instance: its
// create was interrupted (the primary that ran it died or lost its term).
func (f *Fleet) resume(ctx context.Context, pt *providerTerm, v NodeView) {
	n := v.Node
	if !f.claim(n.GetNodeId()) {
		return
	}
	f.cfg.Metrics.Reconciled.WithLabelValues(pt.p.Name(), "launch_resumed").Inc()
	f.log.Info("repeating the launch of a node whose create was interrupted", "node", n.GetNodeId(), "provider", pt.p.Name(),
		"clientToken", n.GetCloud().GetClientToken())
	pt.wg.Add(1)
	go func() {
		defer pt.wg.Done()
		defer f.release(n.GetNodeId())
		actx := WithActor(ctx, "provider/"+pt.p.Name(), "resumeCreate")
		if _, err := f.launch(actx, pt.p, n, v.Token); err != nil {
			f.log.Warn("repeated launch failed", "node", n.GetNodeId(), "err", err)
		}
	}()
}

func missingTags(want, have map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			out[k] = v
		}
	}
	return out
}
