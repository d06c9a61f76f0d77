// Package discovery holds what a discovery replica (norsk-mgr) and the
// tools around it need of the Norsk Manager's discovery fleet: minting and
// verifying node tokens, and the tier secrets a replica accepts.
//
// # Node tokens
//
// A node token proves to a discovery replica that the node was admitted by
// the Manager. The Manager mints it from the fleet's tier secret for the
// node's id and sends it to the node (with the fleet's addresses and leaf
// token); the tier secret itself never leaves the Manager and its replicas.
// The token is
//
//	nnt1.<nodeID>.<mac>
//
// where "nnt1" names the format (node token, version 1), <nodeID> is the
// node's id as it is (1-256 bytes of printable ASCII other than space;
// Manager node ids are letters, digits, '.', '_' and '-') and <mac> is the
// unpadded base64url encoding (43 characters) of
//
//	HMAC-SHA256(key = tier secret, message = "norsk-node-token/v1" 0x00 nodeID)
//
// The node id is read back up to the last '.', so an id may itself hold
// dots. A replica verifies a token with VerifyNodeToken against the secrets
// in force (SecretsInForce): the tier secret and, during a rotation, the
// alternate one. Comparisons are constant-time.
//
// # Rotation
//
// A rotation of the tier secret goes stage → flip → finish (see the
// Manager's RotateDiscoveryTierSecret): after stage replicas also accept the
// new secret, after flip the new secret mints tokens and the old one is
// still accepted, after finish the old one is refused. A replica that takes
// each step it reads, verifying with SecretsInForce of the fleet it holds,
// never refuses a token that is valid at that moment.
package discovery

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// TokenPrefix starts every node token of this format.
const TokenPrefix = "nnt1."

// MaxNodeIDLen is the longest node id a token may carry.
const MaxNodeIDLen = 256

// macLen is the length of the encoded MAC (32 bytes, base64url, no padding).
const macLen = 43

// macDomain separates node-token MACs from any other use of the secret.
const macDomain = "norsk-node-token/v1\x00"

// Errors of VerifyNodeToken and ParseNodeToken. They never carry the token
// or a secret.
var (
	// ErrMalformed: the string is not a node token of this format.
	ErrMalformed = errors.New("discovery: malformed node token")
	// ErrRefused: a well-formed token that no secret in force minted.
	ErrRefused = errors.New("discovery: node token refused: not minted from a tier secret in force")
	// ErrNoSecrets: no (non-empty) secret to verify against.
	ErrNoSecrets = errors.New("discovery: no tier secret to verify node tokens against")
)

// ValidNodeID reports whether a node id can be carried in a token.
func ValidNodeID(nodeID string) bool {
	if nodeID == "" || len(nodeID) > MaxNodeIDLen {
		return false
	}
	for i := 0; i < len(nodeID); i++ {
		if c := nodeID[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

func mac(secret, nodeID string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(macDomain))
	m.Write([]byte(nodeID))
	return m.Sum(nil)
}

// MintNodeToken mints the node token of nodeID from tierSecret. A token
// minted for an id that ValidNodeID refuses, or from an empty secret, is
// never accepted by VerifyNodeToken.
func MintNodeToken(tierSecret, nodeID string) string {
	return TokenPrefix + nodeID + "." + base64.RawURLEncoding.EncodeToString(mac(tierSecret, nodeID))
}

// ParseNodeToken splits a token into the node id it names and its MAC,
// without verifying it (a node may use it to check that a token is its own;
// only a replica, holding the secrets, can verify one).
func ParseNodeToken(token string) (nodeID string, sum []byte, err error) {
	rest, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok {
		return "", nil, ErrMalformed
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", nil, ErrMalformed
	}
	nodeID, enc := rest[:i], rest[i+1:]
	if !ValidNodeID(nodeID) || len(enc) != macLen {
		return "", nil, ErrMalformed
	}
	sum, err = base64.RawURLEncoding.Strict().DecodeString(enc)
	if err != nil || len(sum) != sha256.Size {
		return "", nil, ErrMalformed
	}
	return nodeID, sum, nil
}

// VerifyNodeToken checks token against every non-empty secret given (the
// tier secret in force and, during a rotation, the alternate: see
// SecretsInForce) and returns the node id it was minted for. Every secret
// is tried, and each MAC compared in constant time, whichever matches.
// Errors: ErrMalformed, ErrNoSecrets, ErrRefused.
func VerifyNodeToken(token string, secrets ...string) (nodeID string, err error) {
	nodeID, sum, err := ParseNodeToken(token)
	if err != nil {
		return "", err
	}
	ok, tried := 0, 0
	for _, s := range secrets {
		if s == "" {
			continue
		}
		tried++
		if hmac.Equal(sum, mac(s, nodeID)) {
			ok = 1
		}
	}
	switch {
	case tried == 0:
		return "", ErrNoSecrets
	case ok == 0:
		return "", ErrRefused
	}
	return nodeID, nil
}

// SecretsInForce are the tier secrets a replica accepts node tokens from:
// the fleet's tier secret and, during a rotation (stage or flip), the
// alternate one. Nil for a nil fleet.
func SecretsInForce(fleet *managerv1.DiscoveryFleet) []string {
	var out []string
	if s := fleet.GetTierSecret(); s != "" {
		out = append(out, s)
	}
	if s := fleet.GetTierSecretAlt(); s != "" {
		out = append(out, s)
	}
	return out
}

// Access is the access the Manager sends the node nodeID: every replica
// address, the leaf token and the node's token minted from the tier secret
// that mints (after a rotation's flip, the new one). Nil for a nil fleet.
// The tier secret is not in it.
func Access(fleet *managerv1.DiscoveryFleet, nodeID string) *managerv1.DiscoveryAccess {
	if fleet == nil || fleet.GetTierSecret() == "" {
		return nil
	}
	return &managerv1.DiscoveryAccess{
		Addresses: append([]string(nil), fleet.GetAddresses()...),
		Address:   fleet.GetAddress(),
		LeafToken: fleet.GetLeafToken(),
		NodeToken: MintNodeToken(fleet.GetTierSecret(), nodeID),
	}
}
