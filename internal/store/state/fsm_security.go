package state

import (
	"encoding/hex"
	"regexp"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// Roles of API tokens (pkg/jobspec holds the list the API accepts).
const (
	RoleAdmin     = jobspec.RoleAdmin
	RoleOperator  = jobspec.RoleOperator
	RoleReadOnly  = jobspec.RoleReadOnly
	RoleWorker    = jobspec.RoleWorker
	RolePublisher = jobspec.RolePublisher
)

// Roles lists every role.
var Roles = jobspec.Roles

// tokenIDRE is the form of a token id the handler stamps.
var tokenIDRE = regexp.MustCompile(`^[0-9a-f]{8,32}$`)

// Token returns an API token's record, or nil.
func (r *Read) Token(id string) *storev1.TokenRecord {
	if raw := r.first(nil, tableTokens, "id", id); raw != nil {
		return raw.(*storev1.TokenRecord)
	}
	return nil
}

// Tokens returns every API token, by id.
func (r *Read) Tokens() []*storev1.TokenRecord {
	var out []*storev1.TokenRecord
	it := r.iter(nil, tableTokens, "id_prefix", "")
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*storev1.TokenRecord))
	}
	return out
}

func (t *tx) createToken(c *storev1.CreateToken) error {
	tok := c.GetToken()
	if tok == nil {
		return errNoPayload("token")
	}
	if !tokenIDRE.MatchString(tok.GetId()) {
		return apierr.New(apierr.Internal, "create token: bad id %q stamped", tok.GetId())
	}
	if b, err := hex.DecodeString(c.GetSecretHash()); err != nil || len(b) != 32 {
		return apierr.New(apierr.Internal, "create token: no SHA-256 secret hash stamped")
	}
	if t.read().Token(tok.GetId()) != nil {
		return apierr.AlreadyExistsf("token id %q exists", tok.GetId())
	}
	tok.CreatedAt = t.now
	tok.Revoked = false
	tok.RevokedAt = nil
	t.insert(tableTokens, &storev1.TokenRecord{Token: tok, SecretHash: c.GetSecretHash()})
	return nil
}

func (t *tx) revokeToken(c *storev1.RevokeToken) error {
	rec := t.read().Token(c.GetId())
	if rec == nil {
		return apierr.NotFoundf("no token %q", c.GetId())
	}
	if rec.GetToken().GetRevoked() {
		return nil // idempotent
	}
	tok := proto.Clone(rec.GetToken()).(*managerv1.ApiToken)
	tok.Revoked = true
	tok.RevokedAt = t.now
	t.insert(tableTokens, &storev1.TokenRecord{Token: tok, SecretHash: rec.GetSecretHash()})
	return nil
}

// DiscoveryFleet is the fleet in force, or nil.
func (r *Read) DiscoveryFleet() *managerv1.DiscoveryFleet {
	if raw, err := r.txn.First(tableSingletons, "id", singletonDiscovery); err == nil && raw != nil {
		return raw.(*singleton).Msg.(*managerv1.DiscoveryFleet)
	}
	return nil
}

func (t *tx) putDiscovery(f *managerv1.DiscoveryFleet) {
	t.insert(tableSingletons, &singleton{Key: singletonDiscovery, Msg: f})
}

// publishDiscovery answers with a *storev1.PublishDiscoveryResult.
func (t *tx) publishDiscovery(c *storev1.PublishDiscovery) (*storev1.PublishDiscoveryResult, error) {
	in := c.GetFleet()
	if in == nil {
		return nil, errNoPayload("fleet")
	}
	cur := t.read().DiscoveryFleet()
	if cur == nil {
		f := &managerv1.DiscoveryFleet{
			Addresses: in.GetAddresses(), Address: in.GetAddress(),
			LeafToken: in.GetLeafToken(), TierSecret: in.GetTierSecret(),
		}
		t.putDiscovery(f)
		return &storev1.PublishDiscoveryResult{Fleet: f}, nil
	}
	// The first secrets stay in force; the addresses are the publisher's.
	f := proto.Clone(cur).(*managerv1.DiscoveryFleet)
	f.Addresses = in.GetAddresses()
	f.Address = in.GetAddress()
	kept := in.GetTierSecret() != cur.GetTierSecret() || in.GetLeafToken() != cur.GetLeafToken()
	t.putDiscovery(f)
	return &storev1.PublishDiscoveryResult{Fleet: f, SecretsKept: kept}, nil
}

// Rotation steps and phases.
const (
	RotationStage  = jobspec.RotationStage
	RotationFlip   = jobspec.RotationFlip
	RotationFinish = jobspec.RotationFinish
)

// rotateDiscovery answers with the fleet in force.
func (t *tx) rotateDiscovery(c *storev1.RotateDiscovery) (*managerv1.DiscoveryFleet, error) {
	cur := t.read().DiscoveryFleet()
	if cur == nil {
		return nil, apierr.FailedPreconditionf("no discovery fleet has been published; publish one before rotating its tier secret")
	}
	f := proto.Clone(cur).(*managerv1.DiscoveryFleet)
	phase := cur.GetRotationPhase()
	switch c.GetStep() {
	case RotationStage:
		if phase != "" {
			return nil, apierr.FailedPreconditionf("a rotation is already at %q; finish it before staging another", phase)
		}
		n := c.GetNewTierSecret()
		switch {
		case n == "":
			return nil, apierr.New(apierr.Internal, "rotate: no new tier secret stamped")
		case n == cur.GetTierSecret():
			return nil, apierr.Invalid("newTierSecret", "is the tier secret in force")
		case n == cur.GetLeafToken():
			return nil, apierr.Invalid("newTierSecret", "must differ from the leaf token")
		}
		f.TierSecretAlt = n
		f.RotationPhase = RotationStage
	case RotationFlip:
		if phase != RotationStage {
			return nil, apierr.FailedPreconditionf("flip comes after stage (the rotation is at %q)", phaseName(phase))
		}
		f.TierSecret, f.TierSecretAlt = cur.GetTierSecretAlt(), cur.GetTierSecret()
		f.RotationPhase = RotationFlip
	case RotationFinish:
		if phase != RotationFlip {
			return nil, apierr.FailedPreconditionf("finish comes after flip (the rotation is at %q)", phaseName(phase))
		}
		f.TierSecretAlt = ""
		f.RotationPhase = ""
	default:
		return nil, apierr.Invalid("step", "%q is not a rotation step (want stage, flip or finish)", c.GetStep())
	}
	t.putDiscovery(f)
	return f, nil
}

func phaseName(p string) string {
	if p == "" {
		return "no rotation"
	}
	return p
}

// AccessReplica is the newest access replica stored, or nil.
func (r *Read) AccessReplica() *storev1.AccessReplicaState {
	if raw, err := r.txn.First(tableSingletons, "id", singletonAccess); err == nil && raw != nil {
		return raw.(*singleton).Msg.(*storev1.AccessReplicaState)
	}
	return nil
}

// publishAccessReplica answers with a *managerv1.PublishAccessReplicaResponse.
func (t *tx) publishAccessReplica(c *storev1.PublishAccessReplica) (*managerv1.PublishAccessReplicaResponse, error) {
	p := c.GetPublication()
	cur := t.read().AccessReplica()
	have := cur.GetVersion()
	if p.GetSnapshotJws() == "" {
		if p.GetAttestationJws() == "" {
			return nil, apierr.Invalid("publication", "carries neither a snapshot nor an attestation")
		}
		if c.GetVersion() != have || have == 0 {
			return nil, apierr.FailedPreconditionf("the attestation is of version %d, the stored replica is at %d", c.GetVersion(), have)
		}
		n := proto.Clone(cur).(*storev1.AccessReplicaState)
		n.Publication.AttestationJws = p.GetAttestationJws()
		t.insert(tableSingletons, &singleton{Key: singletonAccess, Msg: n})
		return &managerv1.PublishAccessReplicaResponse{Version: have}, nil
	}
	if c.GetVersion() <= have {
		return nil, apierr.FailedPreconditionf("the publication is version %d; the stored replica is at %d (a publication must move forward)", c.GetVersion(), have)
	}
	t.insert(tableSingletons, &singleton{Key: singletonAccess, Msg: &storev1.AccessReplicaState{
		Version: c.GetVersion(), Publication: p, RolesJson: c.GetRolesJson(),
	}})
	return &managerv1.PublishAccessReplicaResponse{Version: c.GetVersion(), Changed: true}, nil
}
