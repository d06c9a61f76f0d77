package accessreplica

import (
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	jose "github.com/go-jose/go-jose/v4"
)

// The signing side, for norsk-mgr-like tools and tests: the Manager itself
// never signs.

// Op is one operation of a delta.
type Op struct {
	// Op is "put" or "delete".
	Op  string `json:"op"`
	Key string `json:"key"`
	// Value is the value a put stores (JSON); empty for a delete.
	Value json.RawMessage `json:"value,omitempty"`
}

// GenerateKey makes a private signing key for alg (ES256, EdDSA or RS256)
// named kid.
func GenerateKey(alg jose.SignatureAlgorithm, kid string) (*jose.JSONWebKey, error) {
	var k any
	var err error
	switch alg {
	case jose.ES256:
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, k, err = ed25519.GenerateKey(rand.Reader)
	case jose.RS256:
		k, err = rsa.GenerateKey(rand.Reader, MinRSABits)
	default:
		return nil, fmt.Errorf("accessreplica: algorithm %q (want ES256, EdDSA or RS256)", alg)
	}
	if err != nil {
		return nil, err
	}
	return &jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: string(alg), Use: "sig"}, nil
}

// PublicJWKS is the JWKS of the public halves of keys: the Manager's trusted
// key set.
func PublicJWKS(keys ...*jose.JSONWebKey) ([]byte, error) {
	set := jose.JSONWebKeySet{}
	for _, k := range keys {
		pub := k.Public()
		if !pub.Valid() {
			return nil, fmt.Errorf("accessreplica: key %q has no public half", k.KeyID)
		}
		set.Keys = append(set.Keys, pub)
	}
	return json.MarshalIndent(set, "", "  ")
}

// Sign signs payload with key as a compact JWS with the given "typ" header
// (none when typ is empty) and the key's id as "kid".
func Sign(key *jose.JSONWebKey, typ string, payload []byte) (string, error) {
	if key == nil {
		return "", errors.New("accessreplica: no signing key")
	}
	pub := key.Public()
	alg := keyAlgorithm(pub.Key)
	if alg == "" || key.IsPublic() {
		return "", fmt.Errorf("accessreplica: key %q is not an ES256, EdDSA or RS256 private key", key.KeyID)
	}
	opts := &jose.SignerOptions{}
	if typ != "" {
		opts = opts.WithType(jose.ContentType(typ))
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		return "", fmt.Errorf("accessreplica: %w", err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("accessreplica: %w", err)
	}
	return obj.CompactSerialize()
}

// SnapshotPayload is a snapshot's payload: the gzip of {"version": version,
// "roles": rolesJSON}. rolesJSON must be a JSON object.
func SnapshotPayload(version uint64, rolesJSON []byte) ([]byte, error) {
	if _, err := canonicalObject(rolesJSON); err != nil {
		return nil, fmt.Errorf("accessreplica: roles: %w", err)
	}
	doc, err := json.Marshal(struct {
		Version uint64          `json:"version"`
		Roles   json.RawMessage `json:"roles"`
	}{version, rolesJSON})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(doc); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// SignSnapshot signs version's role store (rolesJSON, a JSON object).
func SignSnapshot(key *jose.JSONWebKey, version uint64, rolesJSON []byte) (string, error) {
	payload, err := SnapshotPayload(version, rolesJSON)
	if err != nil {
		return "", err
	}
	return Sign(key, TypeSnapshot, payload)
}

// SignDelta signs the delta from version from to version to.
func SignDelta(key *jose.JSONWebKey, from, to uint64, ops []Op) (string, error) {
	if ops == nil {
		ops = []Op{}
	}
	payload, err := json.Marshal(struct {
		From uint64 `json:"from"`
		To   uint64 `json:"to"`
		Ops  []Op   `json:"ops"`
	}{from, to, ops})
	if err != nil {
		return "", err
	}
	return Sign(key, TypeDelta, payload)
}

// SignAttestation signs an attestation that version is current.
func SignAttestation(key *jose.JSONWebKey, version uint64) (string, error) {
	payload, err := json.Marshal(struct {
		Version uint64 `json:"version"`
	}{version})
	if err != nil {
		return "", err
	}
	return Sign(key, TypeAttestation, payload)
}

// Diff returns the ops that turn the roles from into the roles to (both JSON
// objects): a put of every key added or changed, a delete of every key
// removed, in key order.
func Diff(from, to []byte) ([]Op, error) {
	var a, b map[string]json.RawMessage
	if err := json.Unmarshal(from, &a); err != nil || a == nil {
		return nil, errors.New("accessreplica: diff: from is not a JSON object")
	}
	if err := json.Unmarshal(to, &b); err != nil || b == nil {
		return nil, errors.New("accessreplica: diff: to is not a JSON object")
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	ops := []Op{}
	for _, k := range sorted {
		av, inA := a[k]
		bv, inB := b[k]
		switch {
		case !inB:
			ops = append(ops, Op{Op: "delete", Key: k})
		case !inA || !sameJSON(av, bv):
			ops = append(ops, Op{Op: "put", Key: k, Value: bv})
		}
	}
	return ops, nil
}

// sameJSON compares two JSON values canonically.
func sameJSON(a, b []byte) bool {
	wrap := func(v []byte) []byte { return append(append([]byte(`{"v":`), v...), '}') }
	ca, err1 := canonicalObject(wrap(a))
	cb, err2 := canonicalObject(wrap(b))
	return err1 == nil && err2 == nil && bytes.Equal(ca, cb)
}
