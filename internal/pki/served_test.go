package pki

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A host agent's certificate names norsk://host/<name> (never a node), and
// VerifyHostAgent accepts it only as that host.
func TestSignHostAgentCSR(t *testing.T) {
	t.Parallel()
	ca, err := InitCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := NewKey()
	csr, _ := CreateCSR(key, "whatever")
	if _, err := SignHostAgentCSR(ca, csr, "", "h", 0); err == nil || !strings.Contains(err.Error(), "host name") {
		t.Errorf("no name: %v", err)
	}
	if _, err := SignHostAgentCSR(ca, []byte("x"), "enc-01", "h", 0); err == nil || !strings.Contains(err.Error(), "certificate request") {
		t.Errorf("garbage: %v", err)
	}
	der, err := SignHostAgentCSR(ca, csr, "enc-01", "10.0.0.5:6797", 0)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	if name, ok := HostAgentOf(c); !ok || name != "enc-01" || c.URIs[0].String() != "norsk://host/enc-01" {
		t.Errorf("URI SANs %v", c.URIs)
	}
	if _, ok := NodeIDOf(c); ok || IsManager(c) {
		t.Error("a host agent's certificate names a node or the Manager")
	}
	if c.VerifyHostname("10.0.0.5") != nil {
		t.Error("no IP SAN for the advertised host")
	}
	other, _ := InitCA(t.TempDir())
	node := workerLeaf(t, ca, "enc-01")
	for _, tc := range []struct {
		name      string
		presented []*x509.Certificate
		roots     *x509.CertPool
		host, err string
	}{
		{"the host", []*x509.Certificate{c}, ca.Pool(), "enc-01", ""},
		{"another host", []*x509.Certificate{c}, ca.Pool(), "enc-02", `for host "enc-01", not "enc-02"`},
		{"another CA", []*x509.Certificate{c}, other.Pool(), "enc-01", "cluster CA"},
		{"a worker's certificate", []*x509.Certificate{node.Cert}, ca.Pool(), "enc-01", "names no host"},
		{"nothing", nil, ca.Pool(), "enc-01", "no certificate"},
	} {
		err := VerifyHostAgent(tc.presented, tc.roots, tc.host)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

// Served keeps its key, takes a certificate for it (checked), keeps it
// for the next start and drops it on Clear; one for another key, from
// another CA, or refused by the caller's check is not taken.
func TestServed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := InitCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := LoadServed(dir, "host", "cn", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Serving() {
		t.Fatal("serving before any certificate")
	}
	if st, err := os.Stat(filepath.Join(dir, "host-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v %v", st, err)
	}
	sign := func(s *Served) []byte {
		der, err := SignHostAgentCSR(ca, s.CSR(), "enc-01", "127.0.0.1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	other, _ := InitCA(t.TempDir())
	stranger, _ := LoadServed(t.TempDir(), "host", "cn", nil)
	refuse := func(*x509.Certificate) error { return os.ErrPermission }
	for _, tc := range []struct {
		name  string
		cert  []byte
		cas   [][]byte
		check func(*x509.Certificate) error
		err   string
	}{
		{"another key's", sign(stranger), [][]byte{ca.Cert.Raw}, nil, "not for this server's key"},
		{"another CA", sign(s), [][]byte{other.Cert.Raw}, nil, "does not verify"},
		{"no CA", sign(s), nil, nil, "no CA"},
		{"refused by the check", sign(s), [][]byte{ca.Cert.Raw}, refuse, "permission"},
		{"garbage", []byte("x"), [][]byte{ca.Cert.Raw}, nil, "unreadable"},
	} {
		if c, err := s.Accept(tc.cert, tc.cas, tc.check); c != nil || err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, %v; want %q", tc.name, c, err, tc.err)
		}
	}
	if s.Serving() {
		t.Fatal("serving a refused certificate")
	}
	if c, err := s.Accept(sign(s), [][]byte{ca.Cert.Raw}, nil); c == nil || err != nil || !s.Serving() {
		t.Fatalf("Accept: %v, %v", c, err)
	}
	again, err := LoadServed(dir, "host", "cn", nil)
	if err != nil || !again.Serving() {
		t.Fatalf("the kept certificate after a restart: serving %v, %v", again != nil && again.Serving(), err)
	}
	again.Clear()
	if again.Serving() {
		t.Error("serving after Clear")
	}
	if third, _ := LoadServed(dir, "host", "cn", nil); third.Serving() {
		t.Error("a cleared certificate came back")
	}
}
