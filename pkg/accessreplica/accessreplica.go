// Package accessreplica verifies norsk-mgr's role-store replica: the
// publications PublishAccessReplica receives and the Manager forwards to
// every worker.
//
// A publication is up to three compact JWS strings (RFC 7515), each signed
// by a key of the trusted key set (a JWKS of public keys, see ParseJWKS)
// with ES256, EdDSA or RS256 — no other algorithm, "none" and HS* included,
// is accepted:
//
//   - snapshot: its payload is the gzip of the JSON role store
//     {"version": n, "roles": {…}}; n ≥ 1; roles is a JSON object. At most
//     MaxRolesBytes once decompressed.
//   - delta: its payload is {"from": m, "to": n, "ops": [{"op": "put",
//     "key": k, "value": v} | {"op": "delete", "key": k}, …]}, applied in
//     order to the top-level keys of version m's roles; the result must be
//     version n's roles. A delete of a key m does not hold does not apply.
//   - attestation: its payload is {"version": n}: nothing changed since n.
//
// A JWS may carry a "typ" header; when it does it must be the one of its
// part (TypeSnapshot, TypeDelta, TypeAttestation), so that one part's JWS
// cannot pass for another's. A "kid" header picks the key of that id;
// without one every key of the algorithm's type is tried. Unknown payload
// fields are ignored; the fields above are required.
//
// Roles are compared canonically: parsed and re-encoded with object keys
// sorted, no insignificant white space and no HTML escaping; numbers keep
// their literal text (1.0 and 1 differ).
//
// VerifyPublication is the Manager's check of a publication against the
// replica it stores; VerifyReplica is a worker's check of a replica the
// Manager forwarded against the one it holds. Both verify every signature
// before they look at anything else, and return an *Error whose Kind says
// whether the publication is bad (Invalid) or does not move forward
// (Stale).
package accessreplica

import (
	"bytes"
	"errors"
	"fmt"

	jose "github.com/go-jose/go-jose/v4"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// The "typ" headers of the three parts.
const (
	TypeSnapshot    = "norsk-access-snapshot+jws"
	TypeDelta       = "norsk-access-delta+jws"
	TypeAttestation = "norsk-access-attestation+jws"
)

// Parts of a publication, as errors name them (the API's JSON field names).
const (
	PartSnapshot    = "snapshotJws"
	PartDelta       = "deltaJws"
	PartAttestation = "attestationJws"
	PartPublication = "publication"
)

// Limits.
const (
	// MaxJWSBytes bounds a snapshot or delta JWS.
	MaxJWSBytes = 8 << 20
	// MaxAttestationBytes bounds an attestation JWS.
	MaxAttestationBytes = 64 << 10
	// MaxRolesBytes bounds a snapshot's payload once decompressed.
	MaxRolesBytes = 16 << 20
)

// State is a replica held: its version and its roles (canonical JSON, as
// Verified.RolesJSON gives them).
type State struct {
	Version   uint64
	RolesJSON []byte
}

// Verified is what a verified publication carries.
type Verified struct {
	// Version is the publication's version: its snapshot's, or for an
	// attestation alone the version attested.
	Version uint64
	// RolesJSON is the snapshot's roles, canonical JSON; nil for an
	// attestation alone.
	RolesJSON []byte
	// Changed is true when the publication brings a version newer than the
	// one held.
	Changed bool
}

// Kind is what kind of refusal an Error is.
type Kind int

const (
	// Invalid: the publication is malformed, a signature does not verify
	// with a trusted key, or a delta does not apply. The API answers
	// INVALID_ARGUMENT.
	Invalid Kind = iota + 1
	// Stale: the publication does not move forward from the version held
	// (an older or equal snapshot, an attestation of another version, a
	// delta from another version). The API answers FAILED_PRECONDITION.
	Stale
)

// Error is a refused publication.
type Error struct {
	Kind Kind
	// Part is the part at fault: PartSnapshot, PartDelta, PartAttestation or
	// PartPublication.
	Part string
	Msg  string
}

func (e *Error) Error() string { return e.Part + ": " + e.Msg }

func invalid(part, format string, args ...any) *Error {
	return &Error{Kind: Invalid, Part: part, Msg: fmt.Sprintf(format, args...)}
}

func stale(part, format string, args ...any) *Error {
	return &Error{Kind: Stale, Part: part, Msg: fmt.Sprintf(format, args...)}
}

// KindOf is the Kind of err's *Error, 0 if it has none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// parsed is the verified content of a publication's parts.
type parsed struct {
	snap  *snapshotPayload
	delta *deltaPayload
	att   *attestationPayload
}

// verifyParts verifies the signature of every part present and decodes it.
func verifyParts(pub *managerv1.AccessReplicaPublication, keys *KeySet) (*parsed, error) {
	if keys == nil || keys.Len() == 0 {
		return nil, errors.New("accessreplica: no trusted keys")
	}
	var p parsed
	if s := pub.GetSnapshotJws(); s != "" {
		payload, err := verifyJWS(PartSnapshot, TypeSnapshot, s, MaxJWSBytes, keys)
		if err != nil {
			return nil, err
		}
		if p.snap, err = decodeSnapshot(payload); err != nil {
			return nil, err
		}
	}
	if s := pub.GetDeltaJws(); s != "" {
		payload, err := verifyJWS(PartDelta, TypeDelta, s, MaxJWSBytes, keys)
		if err != nil {
			return nil, err
		}
		if p.delta, err = decodeDelta(payload); err != nil {
			return nil, err
		}
	}
	if s := pub.GetAttestationJws(); s != "" {
		payload, err := verifyJWS(PartAttestation, TypeAttestation, s, MaxAttestationBytes, keys)
		if err != nil {
			return nil, err
		}
		if p.att, err = decodeAttestation(payload); err != nil {
			return nil, err
		}
	}
	return &p, nil
}

// verifyJWS parses a compact JWS, checks its header and verifies its
// signature with a trusted key; it returns the payload.
func verifyJWS(part, typ, s string, maxLen int, keys *KeySet) ([]byte, error) {
	if len(s) > maxLen {
		return nil, invalid(part, "is %d bytes (at most %d)", len(s), maxLen)
	}
	jws, err := jose.ParseSignedCompact(s, Algorithms)
	if err != nil {
		return nil, invalid(part, "is not a compact JWS signed with ES256, EdDSA or RS256: %v", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, invalid(part, "has %d signatures (want 1)", len(jws.Signatures))
	}
	h := jws.Signatures[0].Protected
	if t, ok := h.ExtraHeaders[jose.HeaderType]; ok {
		if ts, _ := t.(string); ts != typ {
			return nil, invalid(part, "typ header %v: this part's is %q", t, typ)
		}
	}
	alg := jose.SignatureAlgorithm(h.Algorithm)
	cands := keys.candidates(alg, h.KeyID)
	if len(cands) == 0 {
		if h.KeyID != "" {
			return nil, invalid(part, "is signed with key %q (%s), which is not a trusted %s key", h.KeyID, alg, alg)
		}
		return nil, invalid(part, "is signed with %s and no trusted key is a %s key", alg, alg)
	}
	for _, k := range cands {
		if payload, err := jws.Verify(k.Key); err == nil {
			return payload, nil
		}
	}
	if h.KeyID != "" {
		return nil, invalid(part, "signature does not verify with trusted key %q", h.KeyID)
	}
	return nil, invalid(part, "signature does not verify with any trusted key")
}

// VerifyPublication checks a publication as PublishAccessReplica receives
// it, against the replica stored (nil when none is):
//
//   - a change: a snapshot of a version above the stored one, and — when a
//     replica is stored — a delta from the stored version to the snapshot's
//     that turns the stored roles into the snapshot's. On the first
//     publication a delta is optional (norsk-mgr may have had versions this
//     Manager never saw): its signature is verified and its "to" must be the
//     snapshot's version.
//   - no change: an attestation alone, of the stored version.
//
// Every signature is verified first. Refusals are *Error.
func VerifyPublication(pub *managerv1.AccessReplicaPublication, keys *KeySet, stored *State) (Verified, error) {
	snap, delta, att := pub.GetSnapshotJws(), pub.GetDeltaJws(), pub.GetAttestationJws()
	switch {
	case snap == "" && delta != "":
		return Verified{}, invalid(PartDelta, "a delta comes with the snapshot it leads to")
	case snap == "" && att == "":
		return Verified{}, invalid(PartPublication, "carries neither a snapshot nor an attestation")
	case snap != "" && att != "":
		return Verified{}, invalid(PartAttestation, "an attestation comes alone (a change carries a snapshot and a delta)")
	}
	p, err := verifyParts(pub, keys)
	if err != nil {
		return Verified{}, err
	}
	if p.att != nil {
		switch {
		case stored == nil:
			return Verified{}, stale(PartAttestation, "attests version %d, and no replica is stored", p.att.Version)
		case p.att.Version != stored.Version:
			return Verified{}, stale(PartAttestation, "attests version %d; the stored replica is at %d", p.att.Version, stored.Version)
		}
		return Verified{Version: stored.Version}, nil
	}
	v := p.snap.Version
	if stored != nil && v <= stored.Version {
		return Verified{}, stale(PartSnapshot, "is version %d; the stored replica is at %d (a publication must move forward)", v, stored.Version)
	}
	if p.delta != nil && p.delta.To != v {
		return Verified{}, invalid(PartDelta, "leads to version %d, the snapshot is version %d", p.delta.To, v)
	}
	if stored != nil {
		if p.delta == nil {
			return Verified{}, invalid(PartDelta, "is required: a replica is stored (version %d), so a change carries the delta from it", stored.Version)
		}
		if p.delta.From != stored.Version {
			return Verified{}, stale(PartDelta, "is from version %d; the stored replica is at %d", p.delta.From, stored.Version)
		}
		if err := checkDelta(p.delta, stored.RolesJSON, p.snap.Roles); err != nil {
			return Verified{}, err
		}
	}
	return Verified{Version: v, RolesJSON: p.snap.Roles, Changed: true}, nil
}

// VerifyReplica checks a replica a worker is sent — the publication the
// Manager stores: a snapshot, the delta that led to it (if any) and the
// latest attestation of it (if any) — against the one the worker holds (nil
// when none). Every signature is verified; a delta must lead to the
// snapshot's version and, when it is from the version held, turn the held
// roles into the snapshot's; an attestation must be of the snapshot's
// version. A snapshot older than the one held is Stale; the same version is
// accepted unchanged (Changed false) if its roles are the held ones.
func VerifyReplica(pub *managerv1.AccessReplicaPublication, keys *KeySet, held *State) (Verified, error) {
	if pub.GetSnapshotJws() == "" {
		return Verified{}, invalid(PartSnapshot, "is required in a forwarded replica")
	}
	p, err := verifyParts(pub, keys)
	if err != nil {
		return Verified{}, err
	}
	v := p.snap.Version
	if p.delta != nil && p.delta.To != v {
		return Verified{}, invalid(PartDelta, "leads to version %d, the snapshot is version %d", p.delta.To, v)
	}
	if p.att != nil && p.att.Version != v {
		return Verified{}, invalid(PartAttestation, "attests version %d, the snapshot is version %d", p.att.Version, v)
	}
	if held != nil {
		switch {
		case v < held.Version:
			return Verified{}, stale(PartSnapshot, "is version %d; version %d is held", v, held.Version)
		case v == held.Version:
			if !bytes.Equal(p.snap.Roles, held.RolesJSON) {
				return Verified{}, invalid(PartSnapshot, "is version %d with roles other than the ones held for that version", v)
			}
			return Verified{Version: v, RolesJSON: p.snap.Roles}, nil
		}
		if p.delta != nil && p.delta.From == held.Version {
			if err := checkDelta(p.delta, held.RolesJSON, p.snap.Roles); err != nil {
				return Verified{}, err
			}
		}
	}
	return Verified{Version: v, RolesJSON: p.snap.Roles, Changed: true}, nil
}
