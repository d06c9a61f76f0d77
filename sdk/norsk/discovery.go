package norsk

import (
	"context"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Steps of RotateDiscoveryTierSecret, in their order.
const (
	// RotationStage: replicas also accept the new tier secret
	// (TierSecretAlt); with no new secret given, the Manager makes one.
	RotationStage = "stage"
	// RotationFlip: the new secret mints node tokens (it becomes TierSecret,
	// the old one TierSecretAlt, still accepted) and every running node is
	// sent its new token.
	RotationFlip = "flip"
	// RotationFinish: the old secret is no longer accepted.
	RotationFinish = "finish"
)

// PublishDiscoveryFleet publishes the deployment's discovery fleet: every
// replica's host:port (Addresses; or Address alone, the single server of
// protocol 1.4), the leaf token, and the tier secret node tokens are minted
// from. The Manager sends each connected node, and each node at its hello,
// its access: the addresses, the leaf token and a node token minted for it
// (pkg/discovery); the tier secret never reaches a node.
//
// The first tier secret and leaf token published stay in force: a later
// publish carrying different ones keeps them, secretsKept says so, and
// inForce (the fleet in force, always returned) carries the ones to adopt.
// The addresses are always the latest publish's.
//
// Errors: ErrInvalidArgument (no fleet, an empty tier secret or one equal to
// the leaf token, no address or one that is not host:port),
// ErrPermissionDenied (the token's role may not publish).
func (m *Manager) PublishDiscoveryFleet(ctx context.Context, fleet *DiscoveryFleet) (inForce *DiscoveryFleet, secretsKept bool, err error) {
	const op = "PublishDiscoveryFleet"
	if err := m.alive(op); err != nil {
		return nil, false, err
	}
	res, err := m.client.PublishDiscoveryFleet(ctx, connect.NewRequest(&managerv1.PublishDiscoveryFleetRequest{Fleet: fleet}))
	if err != nil {
		return nil, false, wrapError(op, err)
	}
	return res.Msg.GetFleet(), res.Msg.GetSecretsKept(), nil
}

// GetDiscoveryFleet returns the discovery fleet in force, secrets included
// (what a norsk-mgr that does not publish needs to run its own replica), or
// nil when none has been published. During a rotation TierSecretAlt is the
// other secret replicas accept and RotationPhase the last step taken
// ("stage" or "flip"); both are "" otherwise. A replica verifies node
// tokens against discovery.SecretsInForce of it.
func (m *Manager) GetDiscoveryFleet(ctx context.Context) (*DiscoveryFleet, error) {
	const op = "GetDiscoveryFleet"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.GetDiscoveryFleet(ctx, connect.NewRequest(&managerv1.GetDiscoveryFleetRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetFleet(), nil
}

// RotateDiscoveryTierSecret takes one step of rotating the discovery fleet's
// tier secret: RotationStage (newTierSecret is the new secret; "" makes the
// Manager generate one), then RotationFlip, then RotationFinish
// (newTierSecret "" for both). No valid node token is refused at any moment
// provided every replica has taken a step before the next is taken, and
// every node has its new token (the Manager sends it at flip) before
// finish. It returns the fleet in force after the step.
//
// Errors: ErrFailedPrecondition (a step out of order, or no fleet
// published), ErrInvalidArgument (an unknown step, a new secret equal to
// the one in force or to the leaf token, or one given to flip or finish).
func (m *Manager) RotateDiscoveryTierSecret(ctx context.Context, step, newTierSecret string) (*DiscoveryFleet, error) {
	const op = "RotateDiscoveryTierSecret"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.RotateDiscoveryTierSecret(ctx, connect.NewRequest(&managerv1.RotateDiscoveryTierSecretRequest{
		Step: step, NewTierSecret: newTierSecret,
	}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetFleet(), nil
}
