package accessreplica

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	jose "github.com/go-jose/go-jose/v4"
)

// Limits of a key set.
const (
	// MaxKeys is the most keys a JWKS may hold.
	MaxKeys = 64
	// MaxJWKSBytes bounds a JWKS document.
	MaxJWKSBytes = 1 << 20
	// MinRSABits is the smallest RSA modulus accepted.
	MinRSABits = 2048
)

// Algorithms are the signature algorithms accepted, and the only ones: "none",
// the HMAC family (HS*) and everything else are refused when a JWS is
// parsed, before any key is looked at.
var Algorithms = []jose.SignatureAlgorithm{jose.ES256, jose.EdDSA, jose.RS256}

// KeySet is a set of trusted public verification keys, parsed from a JWKS
// (RFC 7517). Every key is public (a private or symmetric key is refused),
// is an ES256 (P-256), EdDSA (Ed25519) or RS256 (RSA of at least 2048 bits)
// key, has "use" unset or "sig", an "alg" (if set) matching its type, and a
// "kid" distinct from every other key's (or none). A KeySet is immutable.
type KeySet struct {
	keys []jose.JSONWebKey
	json string
}

// ParseJWKS parses and checks a JWKS document: {"keys": [...]}. It must hold
// at least one key.
func ParseJWKS(data []byte) (*KeySet, error) {
	if len(data) > MaxJWKSBytes {
		return nil, fmt.Errorf("jwks: %d bytes (at most %d)", len(data), MaxJWKSBytes)
	}
	// Decode key by key so that an error names the key.
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	switch {
	case len(doc.Keys) == 0:
		return nil, errors.New(`jwks: no keys (want {"keys": [<public JWK>, ...]})`)
	case len(doc.Keys) > MaxKeys:
		return nil, fmt.Errorf("jwks: %d keys (at most %d)", len(doc.Keys), MaxKeys)
	}
	ks := &KeySet{}
	kids := map[string]bool{}
	for i, raw := range doc.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("jwks: key %d: %w", i, err)
		}
		if err := checkKey(&k); err != nil {
			return nil, fmt.Errorf("jwks: key %d (kid %q): %w", i, k.KeyID, err)
		}
		if k.KeyID != "" {
			if kids[k.KeyID] {
				return nil, fmt.Errorf("jwks: key %d: kid %q is used twice", i, k.KeyID)
			}
			kids[k.KeyID] = true
		}
		ks.keys = append(ks.keys, k)
	}
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: ks.keys})
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	ks.json = string(b)
	return ks, nil
}

// LoadJWKS reads and parses a JWKS file (see ParseJWKS).
func LoadJWKS(path string) (*KeySet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	if st.Size() > MaxJWKSBytes {
		return nil, fmt.Errorf("jwks %s: %d bytes (at most %d)", path, st.Size(), MaxJWKSBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	ks, err := ParseJWKS(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ks, nil
}

// JSON is the key set as a JWKS document of public keys only.
func (ks *KeySet) JSON() string { return ks.json }

// Len is the number of keys.
func (ks *KeySet) Len() int { return len(ks.keys) }

// checkKey accepts a public signature key of a supported type.
func checkKey(k *jose.JSONWebKey) error {
	if !k.Valid() {
		return errors.New("not a valid key")
	}
	if !k.IsPublic() {
		return errors.New("not a public key (a trusted key set holds public keys only; keep private and symmetric keys away from the Manager)")
	}
	if k.Use != "" && k.Use != "sig" {
		return fmt.Errorf("use %q (want sig)", k.Use)
	}
	alg := keyAlgorithm(k.Key)
	switch {
	case alg == "":
		return fmt.Errorf("unsupported key type %T (want an EC P-256, Ed25519 or RSA key)", k.Key)
	case k.Algorithm != "" && k.Algorithm != string(alg):
		return fmt.Errorf("alg %q does not match the key (want %s)", k.Algorithm, alg)
	}
	if r, ok := k.Key.(*rsa.PublicKey); ok && r.N.BitLen() < MinRSABits {
		return fmt.Errorf("RSA key of %d bits (at least %d)", r.N.BitLen(), MinRSABits)
	}
	return nil
}

// keyAlgorithm is the one algorithm a key verifies, "" if none allowed.
func keyAlgorithm(key any) jose.SignatureAlgorithm {
	switch k := key.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return jose.ES256
		}
	case ed25519.PublicKey:
		return jose.EdDSA
	case *rsa.PublicKey:
		return jose.RS256
	}
	return ""
}

// candidates are the keys that may have made a signature with alg and kid:
// the key named kid (when kid is set), else every key, of alg's type.
func (ks *KeySet) candidates(alg jose.SignatureAlgorithm, kid string) []jose.JSONWebKey {
	var out []jose.JSONWebKey
	for _, k := range ks.keys {
		if kid != "" && k.KeyID != kid {
			continue
		}
		if keyAlgorithm(k.Key) == alg {
			out = append(out, k)
		}
	}
	return out
}
