package api

import (
	"context"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/accessreplica"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// The access replica: norsk-mgr's role store, published as signed JWS
// (pkg/accessreplica documents the formats). The Manager verifies every
// signature against the trusted keys of Config.AccessReplicaKeysFile — and
// that a change's delta turns the stored roles into the snapshot's — before
// it proposes anything; the FSM then checks the publication moves forward.
// The node controller forwards the stored replica with the keys' JWKS to
// every worker, which verifies it again.
//
// Refusals: a JWS that is malformed, signed with another algorithm than
// ES256/EdDSA/RS256, or whose signature does not verify with a trusted key,
// and a delta that does not apply, are INVALID_ARGUMENT naming the JWS
// (publication.snapshotJws, …); a publication that does not move forward
// (an older or equal version, a delta from another version, an attestation
// of another version) is FAILED_PRECONDITION; no keys configured is
// FAILED_PRECONDITION. Nothing is stored on any refusal.

// AccessReplicaKeys are the trusted keys and the lock that makes one
// publication's verification and proposal atomic on this member.
type AccessReplicaKeys struct {
	set *accessreplica.KeySet
	mu  sync.Mutex
}

// LoadAccessReplicaKeys reads the keys file; nil when path is empty.
func LoadAccessReplicaKeys(path string) (*AccessReplicaKeys, error) {
	if path == "" {
		return nil, nil
	}
	set, err := accessreplica.LoadJWKS(path)
	if err != nil {
		return nil, fmt.Errorf("manager: access replica keys: %w", err)
	}
	return &AccessReplicaKeys{set: set}, nil
}

// JWKS is the trusted keys' JWKS, "" when none are configured.
func (k *AccessReplicaKeys) JWKS() string {
	if k == nil {
		return ""
	}
	return k.set.JSON()
}

func (h *Handler) PublishAccessReplica(ctx context.Context, req *connect.Request[managerv1.PublishAccessReplicaRequest]) (*connect.Response[managerv1.PublishAccessReplicaResponse], error) {
	keys := h.cfg.AccessKeys
	if keys == nil {
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("no access replica keys are configured on this Manager (--access-replica-keys, AccessReplicaKeys in config.yaml)"))
	}
	in := req.Msg.GetPublication()
	if in == nil {
		return nil, rpcerr.ToConnect(apierr.Invalid("publication", "is required"))
	}
	pub := &managerv1.AccessReplicaPublication{
		SnapshotJws: in.GetSnapshotJws(), DeltaJws: in.GetDeltaJws(), AttestationJws: in.GetAttestationJws(),
	}
	// One publication at a time: what is verified against is what is
	// stored when the command applies.
	keys.mu.Lock()
	defer keys.mu.Unlock()
	var stored *accessreplica.State
	if cur := h.read().AccessReplica(); cur != nil {
		stored = &accessreplica.State{Version: cur.GetVersion(), RolesJSON: cur.GetRolesJson()}
	}
	v, err := accessreplica.VerifyPublication(pub, keys.set, stored)
	if err != nil {
		return nil, rpcerr.ToConnect(accessReplicaError(err))
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_PublishAccessReplica{PublishAccessReplica: &storev1.PublishAccessReplica{
		Publication: pub, Version: v.Version, RolesJson: v.RolesJSON,
	}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	out := res.Value.(*managerv1.PublishAccessReplicaResponse)
	return connect.NewResponse(&managerv1.PublishAccessReplicaResponse{Version: out.GetVersion(), Changed: out.GetChanged()}), nil
}

// accessReplicaError maps a verification refusal to the API's codes.
func accessReplicaError(err error) error {
	e, ok := err.(*accessreplica.Error)
	if !ok {
		return apierr.New(apierr.Internal, "verify the access replica: %v", err)
	}
	field := "publication"
	if e.Part != accessreplica.PartPublication {
		field += "." + e.Part
	}
	if e.Kind == accessreplica.Stale {
		return apierr.FailedPreconditionf("%s: %s", field, e.Msg)
	}
	return apierr.Invalid(field, "%s", e.Msg)
}
