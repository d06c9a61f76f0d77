package providers

import (
	"context"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Reserver is implemented by providers that choose the machine before the
// node is recorded (the mock provider picks a free host): the node is
// recorded with it, and Launch (spec.Reserved) boots it.
type Reserver interface {
	// Reserve chooses a machine that no live node holds (inUse).
	Reserve(ctx context.Context, inUse map[string]bool) (string, error)
	// Hardware is what a new node is promised until its worker reports
	// its own.
	Hardware() *managerv1.Hardware
}

// StartTimeouter is implemented by providers with a start timeout of their
// own (the mock provider); others get FleetConfig.StartTimeout.
type StartTimeouter interface {
	StartTimeout() time.Duration
}

// Tracker is implemented by providers whose List is the whole truth about
// their instances (the clouds, the mock provider's hosts): a live node
// whose instance is gone from it is marked terminated.
type Tracker interface {
	TracksInstances() bool
}

// CreateReserved creates a node of a Reserver provider: it reserves a
// machine, records the node (STARTING, on that machine) and launches it.
// A reservation that fails records nothing (RESOURCE_EXHAUSTED); a launch
// that fails records the node terminated (UNAVAILABLE). Call it on the
// primary: the primary chooses, so two creates never pick the same
// machine.
func (f *Fleet) CreateReserved(ctx context.Context, provider, nodeID, pool string, tags map[string]string) (Created, error) {
	p, ok := f.reg.Provider(provider)
	if !ok {
		return Created{}, apierr.FailedPreconditionf("this Manager has no %s provider", provider)
	}
	res, ok := p.(Reserver)
	if !ok {
		return Created{}, apierr.FailedPreconditionf("provider %s does not reserve machines", provider)
	}
	f.reserveMu.Lock()
	defer f.reserveMu.Unlock()
	machine, err := res.Reserve(ctx, f.inUse(provider))
	if err != nil {
		f.cfg.Metrics.Failed.WithLabelValues(provider).Inc()
		return Created{}, apierr.New(apierr.ResourceExhausted, "%s", err.Error())
	}
	token := f.cfg.Backend.NewRegistrationToken()
	if _, err := f.cfg.Backend.Apply(ctx, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{
		NodeId: nodeID, NodeName: nodeID, Pool: pool, Token: token, Tags: tags,
		Provider: provider, ProviderInstance: machine, Hardware: res.Hardware(), SpareByReconciler: IsSpareReconciler(ctx),
	}}}); err != nil {
		return Created{}, err
	}
	urls, caPin := f.cfg.Backend.Registration()
	inst, err := p.Launch(ctx, LaunchSpec{
		NodeID: nodeID, ClusterID: f.clusterID(), Reserved: machine, Tags: userTags(tags),
		UserData: UserData{NodeID: nodeID, ManagerURLs: urls, Token: token, CAHash: caPin}.Encode(),
	})
	if err != nil {
		f.cfg.Metrics.Failed.WithLabelValues(provider).Inc()
		why := "create failed: " + err.Error()
		if _, terr := f.cfg.Backend.Apply(context.WithoutCancel(ctx), &storev1.Command{Cmd: &storev1.Command_TerminateNode{TerminateNode: &storev1.TerminateNode{
			NodeId: nodeID, Reason: why,
		}}}); terr != nil {
			f.log.Warn("could not record a failed create", "provider", provider, "node", nodeID, "err", terr)
		}
		return Created{}, apierr.New(apierr.Unavailable, "node %s: %s", nodeID, why)
	}
	f.cfg.Metrics.Created.WithLabelValues(provider).Inc()
	f.log.Info("node created", "provider", provider, "node", nodeID, "pool", pool, "machine", inst.ID)
	return Created{NodeID: nodeID, Instance: inst}, nil
}

// inUse are the provider instances held by this provider's nodes that are
// not terminated.
func (f *Fleet) inUse(provider string) map[string]bool {
	taken := map[string]bool{}
	for _, v := range f.cfg.Backend.Nodes() {
		n := v.Node
		if n.GetProvider() == provider && n.GetState() != managerv1.NodeState_NODE_STATE_TERMINATED && n.GetProviderInstance() != "" {
			taken[n.GetProviderInstance()] = true
		}
	}
	return taken
}
