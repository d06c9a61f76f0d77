package api

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// The discovery fleet's secrets (the tier secret, the leaf token) are never
// logged, put in an event or in an audit entry: the audit log records the
// call and its target ("discovery") only.

// MinTierSecretLen is the shortest tier secret the Manager takes: node
// tokens are HMACs under it, so it needs the entropy of an HMAC key.
const MinTierSecretLen = jobspec.MinTierSecretLen

func (h *Handler) PublishDiscoveryFleet(ctx context.Context, req *connect.Request[managerv1.PublishDiscoveryFleetRequest]) (*connect.Response[managerv1.PublishDiscoveryFleetResponse], error) {
	f := req.Msg.GetFleet()
	if err := jobspec.ValidateDiscoveryFleet(f); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	// A shorter secret is refused unless it is the one already in force
	// (published before this bound: the fleet keeps it, and its publisher
	// republishes what it adopted). The FSM does not re-check the length,
	// so a log holding a short one replays as committed.
	if n := len(f.GetTierSecret()); n < MinTierSecretLen && f.GetTierSecret() != h.read().DiscoveryFleet().GetTierSecret() {
		return nil, rpcerr.ToConnect(apierr.Invalid("fleet.tierSecret", "is %d bytes (at least %d: node tokens are HMACs under it)", n, MinTierSecretLen))
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_PublishDiscovery{PublishDiscovery: &storev1.PublishDiscovery{
		Fleet: &managerv1.DiscoveryFleet{
			Addresses: f.GetAddresses(), Address: f.GetAddress(),
			LeafToken: f.GetLeafToken(), TierSecret: f.GetTierSecret(),
		},
	}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	pr := res.Value.(*storev1.PublishDiscoveryResult)
	return connect.NewResponse(&managerv1.PublishDiscoveryFleetResponse{
		Fleet:       proto.Clone(pr.GetFleet()).(*managerv1.DiscoveryFleet),
		SecretsKept: pr.GetSecretsKept(),
	}), nil
}

func (h *Handler) GetDiscoveryFleet(ctx context.Context, req *connect.Request[managerv1.GetDiscoveryFleetRequest]) (*connect.Response[managerv1.GetDiscoveryFleetResponse], error) {
	out := &managerv1.GetDiscoveryFleetResponse{}
	if f := h.read().DiscoveryFleet(); f != nil {
		out.Fleet = proto.Clone(f).(*managerv1.DiscoveryFleet)
	}
	return connect.NewResponse(out), nil
}

// generatedTierSecretBytes is the entropy of a tier secret the Manager
// makes for a stage without one (256 bits).
const generatedTierSecretBytes = 32

func (h *Handler) RotateDiscoveryTierSecret(ctx context.Context, req *connect.Request[managerv1.RotateDiscoveryTierSecretRequest]) (*connect.Response[managerv1.RotateDiscoveryTierSecretResponse], error) {
	step, secret := req.Msg.GetStep(), req.Msg.GetNewTierSecret()
	if err := jobspec.ValidateRotation(step, secret); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if step == jobspec.RotationStage && secret == "" {
		secret = auth.RandomToken("nts_", generatedTierSecretBytes)
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_RotateDiscovery{RotateDiscovery: &storev1.RotateDiscovery{
		Step: step, NewTierSecret: secret,
	}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	f := res.Value.(*managerv1.DiscoveryFleet)
	return connect.NewResponse(&managerv1.RotateDiscoveryTierSecretResponse{Fleet: proto.Clone(f).(*managerv1.DiscoveryFleet)}), nil
}
