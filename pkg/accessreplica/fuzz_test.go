package accessreplica

import (
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// FuzzVerify feeds arbitrary strings as the three JWS of a publication,
// against a stored replica and none, on the Manager's and a worker's path:
// nothing may panic, and only a well-signed publication may pass.
func FuzzVerify(f *testing.F) {
	fx := newFixture(f, jose.ES256)
	p1, p2 := fx.publish1(f), fx.publish2(f)
	att, _ := SignAttestation(fx.key, 1)
	f.Add(p1.SnapshotJws, "", "")
	f.Add(p2.SnapshotJws, p2.DeltaJws, "")
	f.Add("", "", att)
	f.Add(flip(p1.SnapshotJws, 1), "", "")
	f.Add("eyJhbGciOiJub25lIn0.e30.", "", "")
	f.Add("a.b.c", "..", "...")
	stored := &State{Version: 1, RolesJSON: []byte(`{"alice":{"role":"admin"},"bob":{"role":"viewer"}}`)}
	f.Fuzz(func(t *testing.T, snap, delta, attest string) {
		pub := &managerv1.AccessReplicaPublication{SnapshotJws: snap, DeltaJws: delta, AttestationJws: attest}
		for _, st := range []*State{nil, stored} {
			if v, err := VerifyPublication(pub, fx.keys, st); err == nil && v.Version == 0 {
				t.Fatalf("accepted version 0: %+v", v)
			}
			_, _ = VerifyReplica(pub, fx.keys, st)
		}
	})
}

// FuzzPayloads signs arbitrary bytes as each part's payload, so the
// decoders behind the signature check (gunzip, JSON, the delta's ops) see
// outside input too.
func FuzzPayloads(f *testing.F) {
	fx := newFixture(f, jose.EdDSA)
	snap, _ := SnapshotPayload(2, []byte(`{"alice":{"role":"admin"}}`))
	f.Add(snap, []byte(`{"from":1,"to":2,"ops":[{"op":"delete","key":"bob"}]}`), []byte(`{"version":1}`))
	f.Add([]byte{0x1f, 0x8b}, []byte(`{"from":1,"to":2,"ops":[{"op":"put","key":"x"}]}`), []byte(`{"version":-1}`))
	f.Add([]byte(`{}`), []byte(`{"from":1,"to":2,"ops":[{"op":"put","key":"x","value":{"a":[1e999]}}]}`), []byte(`[]`))
	stored := &State{Version: 1, RolesJSON: []byte(`{"alice":{"role":"admin"},"bob":{"role":"viewer"}}`)}
	f.Fuzz(func(t *testing.T, snapPayload, deltaPayload, attPayload []byte) {
		s, err := Sign(fx.key, TypeSnapshot, snapPayload)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Sign(fx.key, TypeDelta, deltaPayload)
		if err != nil {
			t.Fatal(err)
		}
		a, err := Sign(fx.key, TypeAttestation, attPayload)
		if err != nil {
			t.Fatal(err)
		}
		for _, pub := range []*managerv1.AccessReplicaPublication{
			{SnapshotJws: s, DeltaJws: d},
			{SnapshotJws: s},
			{AttestationJws: a},
			{SnapshotJws: s, DeltaJws: d, AttestationJws: a},
		} {
			for _, st := range []*State{nil, stored} {
				v, err := VerifyPublication(pub, fx.keys, st)
				if err == nil && v.Changed {
					if _, cerr := canonicalObject(v.RolesJSON); cerr != nil {
						t.Fatalf("accepted roles that are not an object: %q", v.RolesJSON)
					}
				}
				_, _ = VerifyReplica(pub, fx.keys, st)
			}
		}
	})
}

// FuzzParseJWKS: any document parses or is refused, without a panic.
func FuzzParseJWKS(f *testing.F) {
	ed, _ := GenerateKey(jose.EdDSA, "ed")
	doc, _ := PublicJWKS(ed)
	f.Add(doc)
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"","y":""}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if ks, err := ParseJWKS(b); err == nil {
			if _, err := ParseJWKS([]byte(ks.JSON())); err != nil {
				t.Fatalf("the JSON of an accepted set does not parse: %v", err)
			}
		}
	})
}
