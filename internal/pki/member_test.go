package pki

import (
	"crypto/tls"
	"testing"
	"time"
)

// Raft between members is mutual TLS: members of one cluster CA connect;
// a member of another CA, or a certificate of the right CA that names no
// member (a worker's, the API's), is refused.
func TestMemberTLS(t *testing.T) {
	ca, err := InitCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := InitCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	member := func(ca *CA, name string) *tls.Config {
		l, err := IssueMember(ca, name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return MemberTLSConfig(ca, Static(l.TLSCertificate()))
	}
	m1, m2 := member(ca, "m1"), member(ca, "m2")
	if cerr, serr := handshake(t, m1, m2); cerr != nil || serr != nil {
		t.Fatalf("two members: client %v, server %v", cerr, serr)
	}
	if _, serr := handshake(t, member(other, "m9"), m2); serr == nil {
		t.Error("a member of another CA was accepted")
	}
	if cerr, _ := handshake(t, m1, member(other, "m9")); cerr == nil {
		t.Error("a server of another CA was trusted")
	}
	api, err := IssueServer(ca, []string{"mgr-1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	notMember := MemberTLSConfig(ca, Static(api.TLSCertificate()))
	if _, serr := handshake(t, notMember, m2); serr == nil {
		t.Error("a certificate naming no member was accepted as a client")
	}
	if cerr, _ := handshake(t, m1, notMember); cerr == nil {
		t.Error("a server certificate naming no member was trusted")
	}
}
