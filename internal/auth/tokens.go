package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// MintToken makes a new API token: its id, the bearer string and the hash
// of its secret (all the store keeps).
func MintToken() (id, bearer, secretHash string) {
	idb := make([]byte, 8)
	sec := make([]byte, 32)
	if _, err := rand.Read(idb); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	if _, err := rand.Read(sec); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	id = hex.EncodeToString(idb)
	secret := hex.EncodeToString(sec)
	sum := sha256.Sum256([]byte(secret))
	return id, APITokenPrefix + id + "." + secret, hex.EncodeToString(sum[:])
}

// ParseToken splits a bearer API token into id and the hash of its secret.
func ParseToken(bearer string) (id, secretHash string, err error) {
	id, secret, ok := strings.Cut(strings.TrimPrefix(bearer, APITokenPrefix), ".")
	if !strings.HasPrefix(bearer, APITokenPrefix) || !ok || len(id) < 8 || len(secret) < 32 {
		return "", "", fmt.Errorf("%q is not an API token (nmt_<id>.<secret>)", redact(bearer))
	}
	sum := sha256.Sum256([]byte(secret))
	return id, hex.EncodeToString(sum[:]), nil
}

// redact shows the start of a credential only.
func redact(s string) string {
	if len(s) > 8 {
		return s[:8] + "…"
	}
	return "…"
}

// RandomToken returns n random bytes, hex encoded, with a prefix naming
// what it is (so a leaked one is recognisable).
func RandomToken(prefix string, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return prefix + hex.EncodeToString(b)
}

// NewToken makes a new admin-grade API token string ("nmt_<id>.<secret>")
// for manager.Config.BootstrapToken: tests and dev mode choose their first token so
// they can use it.
func NewToken() string {
	_, bearer, _ := MintToken()
	return bearer
}
