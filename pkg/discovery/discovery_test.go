package discovery_test

import (
	"errors"
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/discovery"
)

func TestMintVerify(t *testing.T) {
	tok := discovery.MintNodeToken("s3cret", "worker-1")
	if !strings.HasPrefix(tok, "nnt1.worker-1.") || len(tok) != len("nnt1.worker-1.")+43 {
		t.Fatalf("token %q: not nnt1.<id>.<43-char mac>", tok)
	}
	if strings.Contains(tok, "s3cret") {
		t.Fatal("the token carries the secret")
	}
	if tok != discovery.MintNodeToken("s3cret", "worker-1") {
		t.Fatal("minting is not deterministic")
	}
	id, err := discovery.VerifyNodeToken(tok, "s3cret")
	if err != nil || id != "worker-1" {
		t.Fatalf("verify = %q, %v", id, err)
	}
	// Any of the secrets given.
	if id, err := discovery.VerifyNodeToken(tok, "other", "s3cret"); err != nil || id != "worker-1" {
		t.Fatalf("verify against [other s3cret] = %q, %v", id, err)
	}
	if _, err := discovery.VerifyNodeToken(tok, "other"); !errors.Is(err, discovery.ErrRefused) {
		t.Fatalf("wrong secret: %v, want ErrRefused", err)
	}
	if _, err := discovery.VerifyNodeToken(tok); !errors.Is(err, discovery.ErrNoSecrets) {
		t.Fatalf("no secrets: %v, want ErrNoSecrets", err)
	}
	if _, err := discovery.VerifyNodeToken(tok, "", ""); !errors.Is(err, discovery.ErrNoSecrets) {
		t.Fatalf("empty secrets: %v, want ErrNoSecrets", err)
	}
	// A node id with dots.
	dotted := discovery.MintNodeToken("s3cret", "rack.1.node")
	if id, err := discovery.VerifyNodeToken(dotted, "s3cret"); err != nil || id != "rack.1.node" {
		t.Fatalf("dotted id: %q, %v", id, err)
	}
}

func TestTokenBoundToNode(t *testing.T) {
	a := discovery.MintNodeToken("k", "a")
	b := discovery.MintNodeToken("k", "b")
	// b's MAC under a's id.
	forged := "nnt1.a." + b[strings.LastIndexByte(b, '.')+1:]
	if _, err := discovery.VerifyNodeToken(forged, "k"); !errors.Is(err, discovery.ErrRefused) {
		t.Fatalf("swapped id: %v, want ErrRefused", err)
	}
	if _, err := discovery.VerifyNodeToken(a, "k"); err != nil {
		t.Fatal(err)
	}
}

func TestMalformed(t *testing.T) {
	good := discovery.MintNodeToken("k", "n1")
	mac := good[len("nnt1.n1."):]
	for _, tok := range []string{
		"",
		"nnt1.",
		"nnt1.n1",
		"nnt2.n1." + mac,
		"nnt1.." + mac,
		"nnt1.n 1." + mac,
		"nnt1.n\x001." + mac,
		"nnt1.n1." + mac[:42],
		"nnt1.n1." + mac + "A",
		"nnt1.n1." + mac[:42] + "=",
		"nnt1.n1." + strings.Repeat("+", 43),
		"nnt1." + strings.Repeat("x", discovery.MaxNodeIDLen+1) + "." + mac,
		"NNT1.n1." + mac,
	} {
		if _, err := discovery.VerifyNodeToken(tok, "k"); !errors.Is(err, discovery.ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", tok, err)
		}
	}
	// Tokens minted for ids that cannot be carried are never accepted.
	for _, id := range []string{"", "a b", "é", strings.Repeat("x", discovery.MaxNodeIDLen+1)} {
		if _, err := discovery.VerifyNodeToken(discovery.MintNodeToken("k", id), "k"); err == nil {
			t.Errorf("a token for id %q was accepted", id)
		}
	}
	// Non-canonical base64 (last character's unused bits set) is refused.
	last := mac[42]
	alt := byte('A')
	if last == 'A' {
		alt = 'B'
	}
	if _, err := discovery.VerifyNodeToken("nnt1.n1."+mac[:42]+string(alt), "k"); err == nil {
		t.Error("a token with a changed MAC was accepted")
	}
}

func TestSecretsInForceAndAccess(t *testing.T) {
	if s := discovery.SecretsInForce(nil); s != nil {
		t.Fatalf("nil fleet: %q", s)
	}
	f := &managerv1.DiscoveryFleet{Addresses: []string{"r1:7000", "r2:7000"}, LeafToken: "leaf", TierSecret: "old"}
	if s := discovery.SecretsInForce(f); len(s) != 1 || s[0] != "old" {
		t.Fatalf("no rotation: %q", s)
	}
	f.TierSecretAlt, f.RotationPhase = "new", "stage"
	if s := discovery.SecretsInForce(f); len(s) != 2 || s[0] != "old" || s[1] != "new" {
		t.Fatalf("stage: %q", s)
	}
	a := discovery.Access(f, "n1")
	if a.GetLeafToken() != "leaf" || len(a.GetAddresses()) != 2 || a.GetNodeToken() != discovery.MintNodeToken("old", "n1") {
		t.Fatalf("access: %v", a)
	}
	if strings.Contains(a.String(), "old") || strings.Contains(a.String(), "new") {
		t.Fatalf("the access carries a tier secret: %v", a)
	}
	if discovery.Access(nil, "n1") != nil {
		t.Fatal("access of no fleet")
	}
}

func FuzzParseNodeToken(f *testing.F) {
	f.Add(discovery.MintNodeToken("k", "n1"))
	f.Add(discovery.MintNodeToken("k", "a.b.c"))
	f.Add("nnt1..")
	f.Add("nnt1.x.")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		id, sum, err := discovery.ParseNodeToken(tok)
		if err != nil {
			if !errors.Is(err, discovery.ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			if _, verr := discovery.VerifyNodeToken(tok, "k"); !errors.Is(verr, discovery.ErrMalformed) {
				t.Fatalf("parse refuses %q but verify says %v", tok, verr)
			}
			return
		}
		if !discovery.ValidNodeID(id) || len(sum) != 32 {
			t.Fatalf("parsed %q into id %q and a %d-byte MAC", tok, id, len(sum))
		}
		// A parsed token is canonical: re-minting with the right MAC gives
		// the same shape, and a token that verifies under k is k's.
		if !strings.HasPrefix(tok, "nnt1."+id+".") {
			t.Fatalf("id %q is not the token's", id)
		}
		if vid, err := discovery.VerifyNodeToken(tok, "k"); err == nil {
			if tok != discovery.MintNodeToken("k", vid) {
				t.Fatalf("%q verified but is not the minted token", tok)
			}
		} else if !errors.Is(err, discovery.ErrRefused) {
			t.Fatalf("verify of a well-formed token: %v", err)
		}
	})
}
