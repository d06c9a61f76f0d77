package state

import (
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/apierr"
)

// Roles of API tokens.
const (
	RoleAdmin     = "admin"
	RoleOperator  = "operator"
	RoleReadOnly  = "read-only"
	RoleWorker    = "worker"
	RolePublisher = "publisher"
)

// Roles lists every role.
var Roles = []string{RoleAdmin, RoleOperator, RoleReadOnly, RoleWorker, RolePublisher}

var (
	tokenIDRE   = regexp.MustCompile(`^[0-9a-f]{8,32}$`)
	tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)
)

// ValidateTokenRequest checks a token's name and role.
func ValidateTokenRequest(name, role string, ttlS int64) error {
	if !tokenNameRE.MatchString(name) {
		return apierr.Invalid("name", "%q: use 1-64 letters, digits, '.', '_', '@' and '-', starting with a letter or digit", name)
	}
	known := false
	for _, r := range Roles {
		known = known || r == role
	}
	if !known {
		return apierr.Invalid("role", "%q is not a role (want admin, operator, read-only, worker or publisher)", role)
	}
	if ttlS < 0 {
		return apierr.Invalid("ttlS", "%d must not be negative (0 = never expires)", ttlS)
	}
	return nil
}

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
	if err := ValidateTokenRequest(tok.GetName(), tok.GetRole(), 0); err != nil {
		return err
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

// splitHostPort splits "host:port" or "[v6]:port" (net.SplitHostPort
// without importing the network package into the FSM).
func splitHostPort(addr string) (host, port string, ok bool) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", false
	}
	host, port = addr[:i], addr[i+1:]
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") {
			return "", "", false
		}
		host = host[1 : len(host)-1]
	} else if strings.ContainsAny(host, ":[]") {
		return "", "", false
	}
	return host, port, !strings.ContainsAny(host, " /")
}

// ValidateHostPort checks a host:port address; field names it.
func ValidateHostPort(field, addr string) error {
	host, port, ok := splitHostPort(addr)
	if !ok || host == "" {
		return apierr.Invalid(field, "%q is not host:port", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return apierr.Invalid(field, "%q: port must be 1-65535", addr)
	}
	return nil
}

// ValidateDiscoveryFleet checks a fleet as PublishDiscoveryFleet receives it.
func ValidateDiscoveryFleet(f *managerv1.DiscoveryFleet) error {
	switch {
	case f == nil:
		return apierr.Invalid("fleet", "is required")
	case f.GetTierSecret() == "":
		return apierr.Invalid("fleet.tierSecret", "must not be empty")
	case f.GetTierSecret() == f.GetLeafToken():
		return apierr.Invalid("fleet.tierSecret", "must differ from the leaf token")
	case len(f.GetAddresses()) == 0 && f.GetAddress() == "":
		return apierr.Invalid("fleet.addresses", "give at least one replica address (or address, for a single server)")
	case len(f.GetAddresses()) > 64:
		return apierr.Invalid("fleet.addresses", "has %d addresses (at most 64)", len(f.GetAddresses()))
	case len(f.GetTierSecret()) > 1024 || len(f.GetLeafToken()) > 1024:
		return apierr.Invalid("fleet", "secrets are at most 1024 bytes")
	}
	for i, a := range f.GetAddresses() {
		if err := ValidateHostPort("fleet.addresses["+strconv.Itoa(i)+"]", a); err != nil {
			return err
		}
	}
	if a := f.GetAddress(); a != "" {
		if err := ValidateHostPort("fleet.address", a); err != nil {
			return err
		}
	}
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
	if err := ValidateDiscoveryFleet(in); err != nil {
		return nil, err
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
	RotationStage  = "stage"
	RotationFlip   = "flip"
	RotationFinish = "finish"
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
		case len(n) > 1024:
			return nil, apierr.Invalid("newTierSecret", "is at most 1024 bytes")
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
