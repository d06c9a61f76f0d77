package manager

import (
	"context"
	"fmt"

	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/manager/intercept"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudhypervisor"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
)

// The Manager's side of the providers is this thin layer: the fleet
// (internal/providers) creates nodes, runs the empty-node reaper, start
// timeouts and reconciliation during the primary's term, and reaches the
// store only through fleetBackend.

// newFleet builds the member's provider registry and fleet from its
// configuration.
func (s *Server) newFleet() error {
	var ps []providers.Provider
	if s.cfg.MockProvider != nil {
		ps = append(ps, mock.New(*s.cfg.MockProvider, nil))
	}
	clouds, err := s.cfg.buildClouds(s.cfg.Logger)
	if err != nil {
		return err
	}
	for _, p := range clouds {
		if ch, ok := p.(*cloudhypervisor.Provider); ok {
			// Host agents registered at run time, from this member's state.
			ch.SetRegistered(func() map[string]cloudhypervisor.Host {
				st := s.st()
				if st == nil {
					return nil
				}
				out := map[string]cloudhypervisor.Host{}
				for _, r := range st.State().Snapshot().HostAgents() {
					if r.GetTokenUsed() {
						out[r.GetName()] = cloudhypervisor.Host{URL: r.GetUrl(), Secret: r.GetSecret()}
					}
				}
				return out
			})
			if f := s.tls.hostAgentTLS(); f != nil {
				ch.SetTLS(f)
			}
		}
	}
	ps = append(ps, clouds...)
	ps = append(ps, s.cfg.Providers...)
	reg, err := providers.NewRegistry(providers.RegistryConfig{
		Providers: ps, OverridesFile: s.cfg.OverridesFile, CatalogRefresh: s.cfg.InstanceTypeRefresh,
		Clock: s.cfg.Clock, Logger: s.base,
	})
	if err != nil {
		return fmt.Errorf("manager: providers: %w", err)
	}
	s.fleet = providers.NewFleet(providers.FleetConfig{
		Registry: reg, Backend: fleetBackend{s}, ClusterID: s.cfg.ClusterID, WorkerVersion: buildinfo.Version,
		StartTimeout: s.cfg.CloudStartTimeout, DefaultIdleExpiry: s.cfg.DefaultIdleExpiry,
		ReaperInterval: s.cfg.ReaperInterval, ReconcileInterval: s.cfg.ReconcileInterval, ListGrace: s.cfg.ListGrace,
		Throttle: s.cfg.ProviderBackoff, Metrics: s.provMetrics, Clock: s.cfg.Clock, Logger: s.base,
	})
	return nil
}

// fleetBackend is the fleet's view of this member.
type fleetBackend struct{ s *Server }

func (b fleetBackend) ClusterID() string {
	if st := b.s.st(); st != nil {
		return st.State().Snapshot().ClusterID()
	}
	return ""
}

func (b fleetBackend) Nodes() []providers.NodeView {
	st := b.s.st()
	if st == nil {
		return nil
	}
	r := st.State().Snapshot()
	recs := r.Nodes(nil)
	out := make([]providers.NodeView, 0, len(recs))
	for _, rec := range recs {
		v := providers.NodeView{Node: rec.GetNode(), Token: rec.GetToken()}
		for _, in := range r.InstancesOnNode(nil, rec.GetNode().GetNodeId()) {
			if in.GetPhase() != managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
				v.Busy = true
				break
			}
		}
		out = append(out, v)
	}
	return out
}

// Apply stamps the command with the time and the audit stamp of the API
// call in ctx, or of the daemon's actor (providers.WithActor).
func (b fleetBackend) Apply(ctx context.Context, cmd *storev1.Command) (uint64, error) {
	cmd.Time = timestamppb.New(b.s.cfg.Clock.Now())
	if a, ok := providers.ActorOf(ctx); ok {
		cmd.Audit = &storev1.AuditStamp{Who: a.Who, Method: a.Method, Target: intercept.AuditTarget(cmd)}
	} else {
		cmd.Audit = intercept.AuditStamp(ctx, cmd)
	}
	res, err := b.s.member.Apply(ctx, cmd)
	return res.Index, err
}

func (b fleetBackend) Registration() ([]string, string) {
	return b.s.member.MemberURLs(), b.s.CAFingerprint()
}

func (b fleetBackend) NewRegistrationToken() string {
	return auth.RandomToken(auth.RegistrationTokenPrefix, 24)
}

// mockProvider is the mock provider (nil: none configured).
func (s *Server) mockProvider() *mock.Provider {
	p, ok := s.fleet.Registry().Provider(mock.Name)
	if !ok {
		return nil
	}
	mp, _ := p.(*mock.Provider)
	return mp
}
