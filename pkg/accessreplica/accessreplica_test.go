package accessreplica

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

type fixture struct {
	key, other *jose.JSONWebKey
	keys       *KeySet
}

func newFixture(t testing.TB, alg jose.SignatureAlgorithm) *fixture {
	t.Helper()
	key, err := GenerateKey(alg, "k1")
	if err != nil {
		t.Fatal(err)
	}
	// Same kid, another key: the "wrong key" of the tests.
	other, err := GenerateKey(alg, "k1")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := PublicJWKS(key)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ParseJWKS(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{key: key, other: other, keys: keys}
}

// must returns s, panicking on err (signing with a good key does not fail).
func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

const (
	roles1 = `{"alice": {"role": "admin"}, "bob": {"role": "viewer"}}`
	roles2 = `{"alice": {"role": "admin"}, "carol": {"role": "operator"}}`
)

func canon(t testing.TB, s string) []byte {
	t.Helper()
	b, err := canonicalObject([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// publish1 and publish2 are a first publication and a change from it.
func (f *fixture) publish1(t testing.TB) *managerv1.AccessReplicaPublication {
	return &managerv1.AccessReplicaPublication{SnapshotJws: must(SignSnapshot(f.key, 1, []byte(roles1)))}
}

func (f *fixture) publish2(t testing.TB) *managerv1.AccessReplicaPublication {
	ops, err := Diff([]byte(roles1), []byte(roles2))
	if err != nil {
		t.Fatal(err)
	}
	return &managerv1.AccessReplicaPublication{
		SnapshotJws: must(SignSnapshot(f.key, 2, []byte(roles2))),
		DeltaJws:    must(SignDelta(f.key, 1, 2, ops)),
	}
}

func TestVerifyPublicationAccepts(t *testing.T) {
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			f := newFixture(t, alg)
			v, err := VerifyPublication(f.publish1(t), f.keys, nil)
			if err != nil {
				t.Fatalf("first: %v", err)
			}
			if v.Version != 1 || !v.Changed || !bytes.Equal(v.RolesJSON, canon(t, roles1)) {
				t.Fatalf("first: %+v", v)
			}
			stored := &State{Version: v.Version, RolesJSON: v.RolesJSON}
			v, err = VerifyPublication(f.publish2(t), f.keys, stored)
			if err != nil {
				t.Fatalf("change: %v", err)
			}
			if v.Version != 2 || !v.Changed || !bytes.Equal(v.RolesJSON, canon(t, roles2)) {
				t.Fatalf("change: %+v", v)
			}
			stored = &State{Version: v.Version, RolesJSON: v.RolesJSON}
			att := &managerv1.AccessReplicaPublication{AttestationJws: must(SignAttestation(f.key, 2))}
			v, err = VerifyPublication(att, f.keys, stored)
			if err != nil {
				t.Fatalf("attestation: %v", err)
			}
			if v.Version != 2 || v.Changed || v.RolesJSON != nil {
				t.Fatalf("attestation: %+v", v)
			}
		})
	}
}

func TestFirstPublicationMayCarryDelta(t *testing.T) {
	f := newFixture(t, jose.EdDSA)
	pub := &managerv1.AccessReplicaPublication{
		SnapshotJws: must(SignSnapshot(f.key, 7, []byte(roles2))),
		DeltaJws:    must(SignDelta(f.key, 6, 7, nil)),
	}
	if _, err := VerifyPublication(pub, f.keys, nil); err != nil {
		t.Fatal(err)
	}
	pub.DeltaJws = must(SignDelta(f.key, 6, 8, nil))
	wantErr(t, pub, f.keys, nil, Invalid, PartDelta, "leads to version 8")
}

func wantErr(t *testing.T, pub *managerv1.AccessReplicaPublication, keys *KeySet, stored *State, kind Kind, part, substr string) {
	t.Helper()
	v, err := VerifyPublication(pub, keys, stored)
	if err == nil {
		t.Fatalf("accepted (%+v); want a %v error on %s", v, kind, part)
	}
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("error %T %v is not an *Error", err, err)
	}
	if e.Kind != kind || e.Part != part || !strings.Contains(e.Msg, substr) {
		t.Fatalf("error %v (kind %v, part %s); want kind %v, part %s, containing %q", err, e.Kind, e.Part, kind, part, substr)
	}
}

// flip changes one character of segment seg (0 header, 1 payload, 2
// signature) of a compact JWS.
func flip(s string, seg int) string {
	parts := strings.Split(s, ".")
	b := []byte(parts[seg])
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	parts[seg] = string(b)
	return strings.Join(parts, ".")
}

func TestVerifyPublicationRefuses(t *testing.T) {
	f := newFixture(t, jose.ES256)
	stored1 := &State{Version: 1, RolesJSON: canon(t, roles1)}
	p1, p2 := f.publish1(t), f.publish2(t)

	t.Run("tampered snapshot payload", func(t *testing.T) {
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: flip(p1.SnapshotJws, 1)}, f.keys, nil, Invalid, PartSnapshot, "signature does not verify")
	})
	t.Run("tampered snapshot signature", func(t *testing.T) {
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: flip(p1.SnapshotJws, 2)}, f.keys, nil, Invalid, PartSnapshot, "")
	})
	t.Run("tampered delta", func(t *testing.T) {
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: p2.SnapshotJws, DeltaJws: flip(p2.DeltaJws, 1)}, f.keys, stored1, Invalid, PartDelta, "")
	})
	t.Run("tampered attestation", func(t *testing.T) {
		att := must(SignAttestation(f.key, 1))
		wantErr(t, &managerv1.AccessReplicaPublication{AttestationJws: flip(att, 2)}, f.keys, stored1, Invalid, PartAttestation, "")
	})
	t.Run("wrong key", func(t *testing.T) {
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: must(SignSnapshot(f.other, 1, []byte(roles1)))}, f.keys, nil, Invalid, PartSnapshot, "does not verify with trusted key \"k1\"")
	})
	t.Run("unknown kid", func(t *testing.T) {
		k, _ := GenerateKey(jose.ES256, "k9")
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: must(SignSnapshot(k, 1, []byte(roles1)))}, f.keys, nil, Invalid, PartSnapshot, "not a trusted")
	})
	t.Run("wrong key type", func(t *testing.T) {
		k, _ := GenerateKey(jose.EdDSA, "k1")
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: must(SignSnapshot(k, 1, []byte(roles1)))}, f.keys, nil, Invalid, PartSnapshot, "not a trusted EdDSA key")
	})
	t.Run("wrong key in delta", func(t *testing.T) {
		ops, _ := Diff([]byte(roles1), []byte(roles2))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: p2.SnapshotJws, DeltaJws: must(SignDelta(f.other, 1, 2, ops))}, f.keys, stored1, Invalid, PartDelta, "does not verify")
	})
	t.Run("alg none", func(t *testing.T) {
		h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`))
		p := strings.Split(p1.SnapshotJws, ".")[1]
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: h + "." + p + "."}, f.keys, nil, Invalid, PartSnapshot, "not a compact JWS")
	})
	t.Run("alg HS256", func(t *testing.T) {
		hk := &jose.JSONWebKey{Key: bytes.Repeat([]byte{1}, 32), KeyID: "k1"}
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: hk}, nil)
		if err != nil {
			t.Fatal(err)
		}
		payload, _ := SnapshotPayload(1, []byte(roles1))
		obj, _ := signer.Sign(payload)
		s, _ := obj.CompactSerialize()
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: s}, f.keys, nil, Invalid, PartSnapshot, "not a compact JWS")
	})
	t.Run("JSON serialization", func(t *testing.T) {
		signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: f.key}, nil)
		payload, _ := SnapshotPayload(1, []byte(roles1))
		obj, _ := signer.Sign(payload)
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: obj.FullSerialize()}, f.keys, nil, Invalid, PartSnapshot, "not a compact JWS")
	})
	t.Run("part swapped", func(t *testing.T) {
		// An attestation JWS presented as a snapshot: its typ says what it is.
		att := must(SignAttestation(f.key, 1))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: att}, f.keys, nil, Invalid, PartSnapshot, "typ header")
		// Without typ headers the payload shapes differ.
		ops, _ := Diff([]byte(roles1), []byte(roles2))
		deltaPayload, _ := json.Marshal(map[string]any{"from": 1, "to": 2, "ops": ops})
		bare := must(Sign(f.key, "", deltaPayload))
		wantErr(t, &managerv1.AccessReplicaPublication{AttestationJws: bare}, f.keys, stored1, Invalid, PartAttestation, "no version")
	})
	t.Run("not gzip", func(t *testing.T) {
		s := must(Sign(f.key, TypeSnapshot, []byte(`{"version":1,"roles":{}}`)))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: s}, f.keys, nil, Invalid, PartSnapshot, "not gzip")
	})
	t.Run("roles not an object", func(t *testing.T) {
		s := must(Sign(f.key, TypeSnapshot, gz(t, `{"version":1,"roles":[1,2]}`)))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: s}, f.keys, nil, Invalid, PartSnapshot, "not a JSON object")
	})
	t.Run("version zero", func(t *testing.T) {
		s := must(Sign(f.key, TypeSnapshot, gz(t, `{"version":0,"roles":{}}`)))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: s}, f.keys, nil, Invalid, PartSnapshot, "no version")
	})
	t.Run("negative version", func(t *testing.T) {
		s := must(Sign(f.key, TypeSnapshot, gz(t, `{"version":-3,"roles":{}}`)))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: s}, f.keys, nil, Invalid, PartSnapshot, "")
	})
	t.Run("gzip bomb", func(t *testing.T) {
		big := `{"version":1,"roles":{"x":"` + strings.Repeat("a", MaxRolesBytes) + `"}}`
		s := must(Sign(f.key, TypeSnapshot, gz(t, big)))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: s}, f.keys, nil, Invalid, PartSnapshot, "decompresses to more than")
	})
	t.Run("oversized JWS", func(t *testing.T) {
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: strings.Repeat("a", MaxJWSBytes+1)}, f.keys, nil, Invalid, PartSnapshot, "at most")
	})
	t.Run("delta missing", func(t *testing.T) {
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: p2.SnapshotJws}, f.keys, stored1, Invalid, PartDelta, "is required")
	})
	t.Run("delta does not apply", func(t *testing.T) {
		// Signed, from the stored version, but its ops lead elsewhere.
		bad := must(SignDelta(f.key, 1, 2, []Op{{Op: "put", Key: "carol", Value: json.RawMessage(`{"role":"operator"}`)}}))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: p2.SnapshotJws, DeltaJws: bad}, f.keys, stored1, Invalid, PartDelta, "does not apply")
	})
	t.Run("delta deletes absent key", func(t *testing.T) {
		bad := must(SignDelta(f.key, 1, 2, []Op{{Op: "delete", Key: "zed"}}))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: p2.SnapshotJws, DeltaJws: bad}, f.keys, stored1, Invalid, PartDelta, "does not apply")
	})
	t.Run("delta from another version", func(t *testing.T) {
		ops, _ := Diff([]byte(roles1), []byte(roles2))
		bad := must(SignDelta(f.key, 0, 2, ops))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: p2.SnapshotJws, DeltaJws: bad}, f.keys, stored1, Stale, PartDelta, "is from version 0")
	})
	t.Run("delta to another version", func(t *testing.T) {
		ops, _ := Diff([]byte(roles1), []byte(roles2))
		bad := must(SignDelta(f.key, 1, 3, ops))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: p2.SnapshotJws, DeltaJws: bad}, f.keys, stored1, Invalid, PartDelta, "leads to version 3")
	})
	t.Run("bad op", func(t *testing.T) {
		payload := []byte(`{"from":1,"to":2,"ops":[{"op":"merge","key":"a","value":1}]}`)
		bad := must(Sign(f.key, TypeDelta, payload))
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: p2.SnapshotJws, DeltaJws: bad}, f.keys, stored1, Invalid, PartDelta, `op "merge"`)
	})
	t.Run("replay of an older version", func(t *testing.T) {
		stored2 := &State{Version: 2, RolesJSON: canon(t, roles2)}
		wantErr(t, p1, f.keys, stored2, Stale, PartSnapshot, "must move forward")
		wantErr(t, p2, f.keys, stored2, Stale, PartSnapshot, "must move forward")
	})
	t.Run("attestation of another version", func(t *testing.T) {
		wantErr(t, &managerv1.AccessReplicaPublication{AttestationJws: must(SignAttestation(f.key, 2))}, f.keys, stored1, Stale, PartAttestation, "attests version 2")
		wantErr(t, &managerv1.AccessReplicaPublication{AttestationJws: must(SignAttestation(f.key, 1))}, f.keys, nil, Stale, PartAttestation, "no replica is stored")
	})
	t.Run("shapes", func(t *testing.T) {
		wantErr(t, &managerv1.AccessReplicaPublication{}, f.keys, nil, Invalid, PartPublication, "neither")
		wantErr(t, &managerv1.AccessReplicaPublication{DeltaJws: p2.DeltaJws}, f.keys, stored1, Invalid, PartDelta, "comes with the snapshot")
		wantErr(t, &managerv1.AccessReplicaPublication{SnapshotJws: p2.SnapshotJws, DeltaJws: p2.DeltaJws, AttestationJws: must(SignAttestation(f.key, 2))}, f.keys, stored1, Invalid, PartAttestation, "comes alone")
	})
}

func gz(t testing.TB, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(s))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestVerifyReplica(t *testing.T) {
	f := newFixture(t, jose.EdDSA)
	p1, p2 := f.publish1(t), f.publish2(t)
	held1 := &State{Version: 1, RolesJSON: canon(t, roles1)}
	held2 := &State{Version: 2, RolesJSON: canon(t, roles2)}

	v, err := VerifyReplica(p2, f.keys, nil)
	if err != nil || v.Version != 2 || !v.Changed {
		t.Fatalf("fresh worker: %+v %v", v, err)
	}
	if v, err = VerifyReplica(p2, f.keys, held1); err != nil || !v.Changed {
		t.Fatalf("from held 1: %+v %v", v, err)
	}
	// The same version again (an attestation added): accepted, unchanged.
	p2.AttestationJws = must(SignAttestation(f.key, 2))
	if v, err = VerifyReplica(p2, f.keys, held2); err != nil || v.Changed {
		t.Fatalf("same version: %+v %v", v, err)
	}
	// An older version is ignored.
	if _, err = VerifyReplica(p1, f.keys, held2); KindOf(err) != Stale {
		t.Fatalf("older: %v", err)
	}
	// A worker that missed versions takes the snapshot; the delta is from a
	// version it never held and is checked for its signature only.
	heldOld := &State{Version: 1, RolesJSON: canon(t, `{"old":1}`)}
	p3ops, _ := Diff([]byte(roles2), []byte(roles1))
	p3 := &managerv1.AccessReplicaPublication{
		SnapshotJws: must(SignSnapshot(f.key, 3, []byte(roles1))),
		DeltaJws:    must(SignDelta(f.key, 2, 3, p3ops)),
	}
	if v, err = VerifyReplica(p3, f.keys, heldOld); err != nil || v.Version != 3 {
		t.Fatalf("missed versions: %+v %v", v, err)
	}
	// Same version, other roles: refused.
	if _, err = VerifyReplica(p1, f.keys, &State{Version: 1, RolesJSON: canon(t, roles2)}); KindOf(err) != Invalid {
		t.Fatalf("same version, other roles: %v", err)
	}
	// Tampering and wrong keys are refused as on the Manager.
	bad := &managerv1.AccessReplicaPublication{SnapshotJws: flip(p1.SnapshotJws, 1)}
	if _, err = VerifyReplica(bad, f.keys, nil); KindOf(err) != Invalid {
		t.Fatalf("tampered: %v", err)
	}
	bad = &managerv1.AccessReplicaPublication{SnapshotJws: p1.SnapshotJws, AttestationJws: must(SignAttestation(f.key, 5))}
	if _, err = VerifyReplica(bad, f.keys, nil); KindOf(err) != Invalid {
		t.Fatalf("attestation of another version: %v", err)
	}
	bad = &managerv1.AccessReplicaPublication{SnapshotJws: p2.SnapshotJws, DeltaJws: must(SignDelta(f.key, 1, 2, []Op{{Op: "delete", Key: "alice"}}))}
	if _, err = VerifyReplica(bad, f.keys, held1); KindOf(err) != Invalid {
		t.Fatalf("delta that does not apply: %v", err)
	}
	if _, err = VerifyReplica(&managerv1.AccessReplicaPublication{AttestationJws: p2.AttestationJws}, f.keys, nil); KindOf(err) != Invalid {
		t.Fatalf("no snapshot: %v", err)
	}
}

func TestCanonicalRoles(t *testing.T) {
	a := canon(t, `{"b": [1, 2.50, "x<y"], "a": {"z": null, "y": true}}`)
	if want := `{"a":{"y":true,"z":null},"b":[1,2.50,"x<y"]}`; string(a) != want {
		t.Fatalf("canonical %s, want %s", a, want)
	}
	for _, bad := range []string{`[]`, `null`, `"x"`, `{} {}`, `{`, ``} {
		if _, err := canonicalObject([]byte(bad)); err == nil {
			t.Errorf("%q accepted as an object", bad)
		}
	}
	ops, err := Diff([]byte(`{"a":1,"b":{"x":1,"y":2},"c":3}`), []byte(`{"a":1,"b":{"y":2,"x":1},"d":4}`))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(ops)
	if want := `[{"op":"delete","key":"c"},{"op":"put","key":"d","value":4}]`; string(got) != want {
		t.Fatalf("diff %s, want %s", got, want)
	}
}

func TestParseJWKS(t *testing.T) {
	es, _ := GenerateKey(jose.ES256, "es")
	ed, _ := GenerateKey(jose.EdDSA, "ed")
	rs, _ := GenerateKey(jose.RS256, "rs")
	doc, err := PublicJWKS(es, ed, rs)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	ks, err := LoadJWKS(path)
	if err != nil {
		t.Fatal(err)
	}
	if ks.Len() != 3 {
		t.Fatalf("%d keys", ks.Len())
	}
	// The JSON it forwards parses back to the same set, public keys only.
	again, err := ParseJWKS([]byte(ks.JSON()))
	if err != nil || again.JSON() != ks.JSON() {
		t.Fatalf("round trip: %v", err)
	}
	if strings.Contains(ks.JSON(), `"d"`) {
		t.Fatal("private material in the JWKS")
	}
	for _, k := range []*jose.JSONWebKey{es, ed, rs} {
		pub := &managerv1.AccessReplicaPublication{SnapshotJws: must(SignSnapshot(k, 1, []byte(`{}`)))}
		if _, err := VerifyPublication(pub, ks, nil); err != nil {
			t.Errorf("%s: %v", k.KeyID, err)
		}
	}

	private, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{*ed}})
	hmac, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: bytes.Repeat([]byte{1}, 32), KeyID: "h"}}})
	edPub := ed.Public()
	edPub.Algorithm = "ES256"
	mismatch, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{edPub}})
	edPub = ed.Public()
	edPub.Use = "enc"
	enc, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{edPub}})
	dup, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{ed.Public(), ed.Public()}})
	for name, doc := range map[string]string{
		"private key":   string(private),
		"symmetric key": string(hmac),
		"alg mismatch":  string(mismatch),
		"use enc":       string(enc),
		"duplicate kid": string(dup),
		"empty":         `{"keys":[]}`,
		"not json":      `keys`,
	} {
		if _, err := ParseJWKS([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
