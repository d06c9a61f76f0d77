package norsk

import (
	"context"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// PublishAccessReplica publishes norsk-mgr's role-store replica
// (pkg/accessreplica describes the formats and can sign them). A change
// carries the new snapshot JWS and, when a replica is stored, the delta JWS
// from the stored version; nothing changed carries an attestation JWS of
// the stored version alone. The Manager verifies every signature against
// its trusted keys before it stores anything, then forwards the replica to
// every connected worker.
//
// It returns the version in force and whether the publication changed it
// (false for an attestation). Errors: ErrInvalidArgument (a JWS that is
// malformed or does not verify with a trusted key, a delta that does not
// apply; the message names the JWS), ErrFailedPrecondition (the
// publication does not move forward — an older or equal version, a delta
// or attestation of another version — or the Manager has no keys
// configured). Nothing is stored on an error.
func (m *Manager) PublishAccessReplica(ctx context.Context, pub *AccessReplicaPublication) (version uint64, changed bool, err error) {
	const op = "PublishAccessReplica"
	if err := m.alive(op); err != nil {
		return 0, false, err
	}
	res, err := m.client.PublishAccessReplica(ctx, connect.NewRequest(&managerv1.PublishAccessReplicaRequest{Publication: pub}))
	if err != nil {
		return 0, false, wrapError(op, err)
	}
	return res.Msg.GetVersion(), res.Msg.GetChanged(), nil
}
