package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/apierr"
	"github.com/norsk-go/norsk-manager/internal/jobspec"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// providerMetrics count what the providers and the empty-node reaper do.
type providerMetrics struct {
	created *prometheus.CounterVec
	failed  *prometheus.CounterVec
	reaped  *prometheus.CounterVec
}

func newProviderMetrics(reg prometheus.Registerer) *providerMetrics {
	m := &providerMetrics{
		created: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "provider", Name: "nodes_created_total",
			Help: "Elastic nodes created, by provider."}, []string{"provider"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "provider", Name: "node_create_failures_total",
			Help: "Elastic node creations that failed, by provider."}, []string{"provider"}),
		reaped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norsk", Subsystem: "provider", Name: "nodes_terminated_total",
			Help: "Elastic nodes terminated by the Manager, by why (idle, start_timeout, lost)."}, []string{"why"}),
	}
	if reg != nil {
		reg.MustRegister(m.created, m.failed, m.reaped)
	}
	return m
}

// liveHosts are the mock hosts held by a node that is not terminated.
func liveHosts(r *state.Read) map[string]bool {
	taken := map[string]bool{}
	for _, rec := range r.Nodes(nil) {
		n := rec.GetNode()
		if n.GetProvider() == mock.Name && n.GetState() != managerv1.NodeState_NODE_STATE_TERMINATED && n.GetProviderInstance() != "" {
			taken[n.GetProviderInstance()] = true
		}
	}
	return taken
}

// CreateMockNode creates an elastic node on a free mock host. The primary
// chooses the host (a follower asks it), so two calls never pick the same.
func (h *handler) CreateMockNode(ctx context.Context, req *connect.Request[managerv1.CreateMockNodeRequest]) (*connect.Response[managerv1.CreateMockNodeResponse], error) {
	p := h.s.mock
	if p == nil {
		return nil, toConnect(apierr.FailedPreconditionf("this Manager has no mock provider (configure providers.mock in config.yaml)"))
	}
	m := req.Msg
	pool := m.GetPool()
	if pool == "" {
		pool = p.Config().Pools[0]
	}
	if !p.Config().Serves(pool) {
		return nil, toConnect(apierr.Invalid("pool", "the mock provider does not create nodes in pool %s (it serves %s)", apierr.Quote(pool), strings.Join(p.Config().Pools, ", ")))
	}
	if err := jobspec.ValidateTags("tags", m.GetTags()); err != nil {
		return nil, toConnect(err)
	}
	if _, spare := m.GetTags()[state.SpareTag]; spare {
		return nil, toConnect(apierr.Invalid("tags", "the %s tag of an elastic node belongs to the AutoManager's reconciler", apierr.Quote(state.SpareTag)))
	}
	nodeID := m.GetNodeId()
	if nodeID == "" {
		nodeID = randomToken("mock-", 4)
	} else if err := jobspec.ValidateID("nodeId", nodeID); err != nil {
		return nil, toConnect(err)
	}
	if h.read().Node(nil, nodeID) != nil || h.read().NodeByName(nil, nodeID) != nil {
		return nil, toConnect(apierr.AlreadyExistsf("node %s already exists", apierr.Quote(nodeID)))
	}
	if out, ok, err := askPrimary(ctx, h.s, req.Header(), func(ctx context.Context, c managerv1connect.ManagerClient) (*connect.Response[managerv1.CreateMockNodeResponse], error) {
		msg := &managerv1.CreateMockNodeRequest{NodeId: nodeID, Pool: pool, Tags: m.GetTags()}
		return c.CreateMockNode(ctx, withAuth(req, connect.NewRequest(msg)))
	}); ok {
		return out, err
	}
	host, err := h.createMockNode(ctx, nodeID, pool, m.GetTags())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&managerv1.CreateMockNodeResponse{NodeId: nodeID, Host: host}), nil
}

// createMockNode picks a host, records the node (STARTING) and boots its
// worker. A boot that fails leaves the node terminated (create failed).
func (h *handler) createMockNode(ctx context.Context, nodeID, pool string, tags map[string]string) (string, error) {
	s := h.s
	s.mockMu.Lock()
	defer s.mockMu.Unlock()
	p := s.mock
	host, err := p.Pick(ctx, liveHosts(s.st().State().Snapshot()))
	if err != nil {
		s.provMetrics.failed.WithLabelValues(mock.Name).Inc()
		return "", apierr.New(apierr.ResourceExhausted, "%s", err.Error())
	}
	token := randomToken("nrt_", 24)
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{
		NodeId: nodeID, NodeName: nodeID, Pool: pool, Token: token, Tags: tags,
		Provider: mock.Name, ProviderInstance: host, Hardware: p.Hardware(),
	}}}); err != nil {
		return "", err
	}
	if err := p.Boot(ctx, host, nodeID, strings.Join(s.memberURLs(), ","), token, s.CAFingerprint()); err != nil {
		s.provMetrics.failed.WithLabelValues(mock.Name).Inc()
		why := "create failed: " + err.Error()
		if _, terr := h.apply(context.WithoutCancel(ctx), &storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{
			NodeId: nodeID, Reason: why,
		}}}); terr != nil {
			s.log.Warn("mock provider: could not record a failed create", "node", nodeID, "err", terr)
		}
		return "", apierr.New(apierr.Unavailable, "node %s: %s", nodeID, why)
	}
	s.provMetrics.created.WithLabelValues(mock.Name).Inc()
	s.log.Info("mock provider: node created", "node", nodeID, "pool", pool, "host", host)
	return host, nil
}

// runReaper is the primary's empty-node reaper and provider watchdog, for
// one primary term: every ReaperInterval it terminates
//   - an elastic node that has been online with no instance for its
//     effective idle expiry (the node's override, else DefaultIdleExpiry),
//   - an elastic node still starting after its provider's start timeout,
//   - an elastic node lost for longer than its idle expiry,
//
// and tells the mock provider to release the host of a terminated node
// whose worker is still running. Idleness is measured from what this term
// has seen (and never from before the node's last state change), so a
// new primary never reaps a node sooner than the old one would have.
func (s *Server) runReaper(ctx context.Context) {
	clk := s.cfg.Clock
	idleSince := map[string]time.Time{}
	released := map[string]bool{}
	for {
		t := clk.NewTimer(s.cfg.ReaperInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		s.reap(ctx, clk.Now(), idleSince, released)
	}
}

func (s *Server) reap(ctx context.Context, now time.Time, idleSince map[string]time.Time, released map[string]bool) {
	st := s.st()
	if st == nil {
		return
	}
	r := st.State().Snapshot()
	seen := map[string]bool{}
	for _, rec := range r.Nodes(nil) {
		n := rec.GetNode()
		if !n.GetElastic() {
			continue
		}
		id := n.GetNodeId()
		seen[id] = true
		expiry := s.cfg.DefaultIdleExpiry
		if ms := n.GetIdleExpiryMs(); ms > 0 {
			// Clamped: an override stored before SetNodeIdleExpiry was
			// bounded must not overflow into a negative expiry.
			expiry = time.Duration(min(ms, MaxIdleExpiry.Milliseconds())) * time.Millisecond
		}
		since := n.GetStateSince().AsTime()
		switch n.GetState() {
		case managerv1.NodeState_NODE_STATE_STARTING:
			if to := s.startTimeout(n); to > 0 && now.Sub(since) >= to {
				s.terminateElastic(ctx, n, false, "start_timeout", fmt.Sprintf("startup time exceeded: its worker did not call in within %s", to))
			}
		case managerv1.NodeState_NODE_STATE_ONLINE:
			busy := false
			for _, in := range r.InstancesOnNode(nil, id) {
				if in.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
					busy = true
					break
				}
			}
			if busy {
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
				s.terminateElastic(ctx, n, true, "idle", fmt.Sprintf("idle for %s (idle expiry %s)", now.Sub(at).Round(time.Second), expiry))
			}
		case managerv1.NodeState_NODE_STATE_LOST:
			if now.Sub(since) >= expiry {
				s.terminateElastic(ctx, n, false, "lost", fmt.Sprintf("lost for %s (idle expiry %s)", now.Sub(since).Round(time.Second), expiry))
			}
		case managerv1.NodeState_NODE_STATE_TERMINATED:
			if n.GetProvider() == mock.Name && s.mock != nil && !released[id] && n.GetProviderInstance() != "" {
				released[id] = true
				s.releaseMockHost(ctx, n)
			}
		}
	}
	for id := range idleSince {
		if !seen[id] {
			delete(idleSince, id)
		}
	}
}

func (s *Server) startTimeout(n *managerv1.Node) time.Duration {
	if n.GetProvider() == mock.Name && s.mock != nil {
		return s.mock.Config().StartTimeout
	}
	return mock.DefaultStartTimeout
}

// terminateElastic terminates an elastic node (onlyIfIdle: refused if an
// instance was bound to it meanwhile, which is not an error).
func (s *Server) terminateElastic(ctx context.Context, n *managerv1.Node, onlyIfIdle bool, kind, why string) {
	_, err := s.applyAs(ctx, "empty-node-reaper", "reap", &storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{
		NodeId: n.GetNodeId(), OnlyIfIdle: onlyIfIdle, Reason: why,
	}}})
	var de *apierr.Error
	switch {
	case err == nil:
		s.provMetrics.reaped.WithLabelValues(kind).Inc()
		s.log.Info("empty-node reaper: terminating an elastic node", "node", n.GetNodeId(), "provider", n.GetProvider(), "why", why)
	case errors.As(err, &de) && de.Code == apierr.FailedPrecondition:
		s.log.Debug("empty-node reaper: node no longer idle", "node", n.GetNodeId(), "err", err)
	default:
		s.log.Warn("empty-node reaper: terminate failed; retrying next round", "node", n.GetNodeId(), "err", err)
	}
}

// releaseMockHost frees the host of a terminated mock node whose worker is
// still running there (its node was lost, or never came online).
func (s *Server) releaseMockHost(ctx context.Context, n *managerv1.Node) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	runs, err := s.mock.Runs(cctx, n.GetProviderInstance(), n.GetNodeId())
	if err != nil || !runs {
		return
	}
	if err := s.mock.Release(cctx, n.GetProviderInstance(), n.GetNodeId()); err != nil {
		s.log.Warn("mock provider: release failed", "node", n.GetNodeId(), "host", n.GetProviderInstance(), "err", err)
		return
	}
	s.log.Info("mock provider: released the host of a terminated node", "node", n.GetNodeId(), "host", n.GetProviderInstance())
}
