package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := InitCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestInitLoadEnsureCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	ca, err := InitCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || ca.Cert.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("CA certificate: IsCA=%v alg=%v", ca.Cert.IsCA, ca.Cert.PublicKeyAlgorithm)
	}
	if life := ca.Cert.NotAfter.Sub(time.Now()); life < 9*365*24*time.Hour {
		t.Errorf("CA lifetime %v, want about 10 years", life)
	}
	st, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("ca-key.pem mode %v, want 0600", st.Mode().Perm())
	}
	if _, err := InitCA(dir); !errors.Is(err, ErrCAExists) {
		t.Errorf("second InitCA: %v, want ErrCAExists", err)
	}
	loaded, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Fingerprint() != ca.Fingerprint() {
		t.Errorf("loaded CA %s, made %s", loaded.Fingerprint(), ca.Fingerprint())
	}
	again, created, err := EnsureCA(dir)
	if err != nil || created || again.Fingerprint() != ca.Fingerprint() {
		t.Errorf("EnsureCA on an existing CA: created=%v err=%v", created, err)
	}
	fresh, created, err := EnsureCA(filepath.Join(t.TempDir(), "new"))
	if err != nil || !created || fresh.Fingerprint() == ca.Fingerprint() {
		t.Errorf("EnsureCA on an empty dir: created=%v err=%v", created, err)
	}
	if _, err := LoadCA(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadCA of an empty dir: %v, want not exist", err)
	}
	// A key that is not the certificate's is refused.
	other := newCA(t)
	if _, err := LoadCAFiles(filepath.Join(dir, CACertFile), filepath.Join(other.Dir, CAKeyFile)); err == nil {
		t.Error("LoadCAFiles with a foreign key: no error")
	}
}

func TestFingerprint(t *testing.T) {
	ca := newCA(t)
	fp := ca.Fingerprint()
	if !strings.HasPrefix(fp, "sha256:") || len(fp) != len("sha256:")+64 {
		t.Fatalf("fingerprint %q", fp)
	}
	hexPart := strings.TrimPrefix(fp, "sha256:")
	var colons []string
	for i := 0; i < len(hexPart); i += 2 {
		colons = append(colons, strings.ToUpper(hexPart[i:i+2]))
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{fp, true},
		{strings.ToUpper(fp), true},
		{"sha256:" + strings.Join(colons, ":"), true},
		{"  " + fp + "\n", true},
		{hexPart, false},
		{"sha1:" + hexPart, false},
		{"sha256:" + hexPart[:62], false},
		{"sha256:zz" + hexPart[2:], false},
	} {
		got, err := certpin.Normalize(tc.in)
		if tc.ok && (err != nil || got != fp) {
			t.Errorf("Normalize(%q) = %q, %v; want %q", tc.in, got, err, fp)
		}
		if !tc.ok && err == nil {
			t.Errorf("Normalize(%q) = %q; want an error", tc.in, got)
		}
	}
}

func TestIssueServerSANs(t *testing.T) {
	ca := newCA(t)
	leaf, err := IssueServer(ca, []string{"mgr.example.com", "10.1.2.3", "0.0.0.0", "Other.Example.com:6790", "[fd00::1]", ""}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"mgr.example.com", "other.example.com", "10.1.2.3", "fd00::1", "localhost", "127.0.0.1", "::1"} {
		if err := leaf.Cert.VerifyHostname(h); err != nil {
			t.Errorf("server cert not valid for %s: %v", h, err)
		}
	}
	if err := leaf.Cert.VerifyHostname("0.0.0.0"); err == nil {
		t.Error("server cert valid for 0.0.0.0")
	}
	if !Covers(leaf.Cert, []string{"mgr.example.com", "10.1.2.3:1"}) || Covers(leaf.Cert, []string{"evil.example.com"}) {
		t.Error("Covers is wrong")
	}
	if len(leaf.Chain) != 2 || string(leaf.Chain[1]) != string(ca.Cert.Raw) {
		t.Error("the served chain is not leaf + CA")
	}
	if _, err := leaf.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "mgr.example.com"}); err != nil {
		t.Errorf("verify: %v", err)
	}
	// Written and read back.
	dir := t.TempDir()
	if err := leaf.WriteFiles(filepath.Join(dir, "s.pem"), filepath.Join(dir, "s-key.pem")); err != nil {
		t.Fatal(err)
	}
	back, err := LoadLeaf(filepath.Join(dir, "s.pem"), filepath.Join(dir, "s-key.pem"))
	if err != nil || back.Cert.SerialNumber.Cmp(leaf.Cert.SerialNumber) != 0 || len(back.Chain) != 2 {
		t.Errorf("LoadLeaf: %v", err)
	}
}

func TestSignWorkerCSR(t *testing.T) {
	ca := newCA(t)
	key, _ := NewKey()
	csr, err := CreateCSR(key, "whatever the worker says")
	if err != nil {
		t.Fatal(err)
	}
	tampered := append([]byte{}, csr...)
	tampered[len(tampered)-3] ^= 0xff

	for _, tc := range []struct {
		name    string
		csr     []byte
		node    string
		host    string
		wantErr string
		check   func(*testing.T, *x509.Certificate)
	}{
		{name: "ip host", csr: csr, node: "worker-1", host: "10.0.0.7:6791", check: func(t *testing.T, c *x509.Certificate) {
			if id, ok := NodeIDOf(c); !ok || id != "worker-1" {
				t.Errorf("node id %q %v", id, ok)
			}
			if c.VerifyHostname("10.0.0.7") != nil {
				t.Error("no IP SAN for the advertise host")
			}
			if c.Subject.CommonName == "whatever the worker says" {
				t.Error("the CSR's subject was used")
			}
			if !PublicKeysEqual(c.PublicKey, key.Public()) {
				t.Error("the certificate is not for the CSR's key")
			}
			if life := time.Until(c.NotAfter); life < 360*24*time.Hour {
				t.Errorf("default lifetime %v, want a year", life)
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				t.Error(err)
			}
		}},
		{name: "dns host", csr: csr, node: "n2", host: "worker.example.com", check: func(t *testing.T, c *x509.Certificate) {
			if c.VerifyHostname("worker.example.com") != nil {
				t.Error("no DNS SAN")
			}
			if c.URIs[0].String() != "norsk://node/n2" {
				t.Errorf("URI SAN %s", c.URIs[0])
			}
		}},
		{name: "tampered", csr: tampered, node: "n", host: "h", wantErr: "signature"},
		{name: "garbage", csr: []byte("not a csr"), node: "n", host: "h", wantErr: "certificate request"},
		{name: "empty", csr: nil, node: "n", host: "h", wantErr: "empty"},
		{name: "no node", csr: csr, node: "", host: "h", wantErr: "node id"},
		{name: "huge", csr: make([]byte, maxCSRBytes+1), node: "n", host: "h", wantErr: "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			der, err := SignWorkerCSR(ca, tc.csr, tc.node, tc.host, 0)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// issueRaw signs a certificate from a template changed by mod (for expired
// and odd certificates).
func issueRaw(t *testing.T, ca *CA, mod func(*x509.Certificate)) *Leaf {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := leafTemplate("test", time.Hour)
	mod(tmpl)
	l, err := sign(ca, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func workerLeaf(t *testing.T, ca *CA, nodeID string) *Leaf {
	t.Helper()
	key, _ := NewKey()
	csr, _ := CreateCSR(key, nodeID)
	der, err := SignWorkerCSR(ca, csr, nodeID, "127.0.0.1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &Leaf{Cert: c, Key: key, Chain: [][]byte{der}}
}

// handshake runs a TLS handshake between the two configs over a pipe and
// returns the client's and the server's errors.
func handshake(t *testing.T, client, server *tls.Config) (cerr, serr error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		s := tls.Server(b, server)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3 clients learn of a refused certificate on their first read.
			_, _ = s.Write([]byte("x"))
		}
		done <- err
		b.Close()
	}()
	c := tls.Client(a, client)
	cerr = c.Handshake()
	if cerr == nil {
		buf := make([]byte, 1)
		_, cerr = c.Read(buf)
	}
	a.Close()
	serr = <-done
	return cerr, serr
}

func TestManagerWorkerMutualTLS(t *testing.T) {
	ca := newCA(t)
	otherCA := newCA(t)
	mgr, err := IssueClient(ca, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if !IsManager(mgr.Cert) || mgr.Cert.Subject.CommonName != "m1" {
		t.Fatal("the client certificate has no norsk://manager URI or the wrong CN")
	}
	foreignMgr, _ := IssueClient(otherCA, "m1")
	good := workerLeaf(t, ca, "node-a")
	foreignWorker := workerLeaf(t, otherCA, "node-a")
	expiredWorker := issueRaw(t, ca, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		c.URIs = []*url.URL{NodeURI("node-a")}
	})
	expiredMgr := issueRaw(t, ca, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		c.URIs = []*url.URL{ManagerURI()}
	})
	notMgr := issueRaw(t, ca, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		c.URIs = []*url.URL{NodeURI("node-b")} // another worker posing as the Manager
	})

	for _, tc := range []struct {
		name       string
		clientCert *Leaf // nil: none
		roots      *CA   // the CA the Manager trusts
		expectNode string
		serverCert *Leaf
		serverCA   *CA // the CA the worker trusts
		wantErr    string
	}{
		{name: "ok", clientCert: mgr, roots: ca, expectNode: "node-a", serverCert: good, serverCA: ca},
		{name: "wrong node id", clientCert: mgr, roots: ca, expectNode: "node-b", serverCert: good, serverCA: ca, wantErr: `for node "node-a", not "node-b"`},
		{name: "worker from another CA", clientCert: mgr, roots: ca, expectNode: "node-a", serverCert: foreignWorker, serverCA: ca, wantErr: "cluster CA"},
		{name: "Manager trusts another CA", clientCert: mgr, roots: otherCA, expectNode: "node-a", serverCert: good, serverCA: ca, wantErr: "cluster CA"},
		{name: "expired worker certificate", clientCert: mgr, roots: ca, expectNode: "node-a", serverCert: expiredWorker, serverCA: ca, wantErr: "expired"},
		{name: "client cert from another CA", clientCert: foreignMgr, roots: ca, expectNode: "node-a", serverCert: good, serverCA: ca, wantErr: "unknown"},
		{name: "expired client cert", clientCert: expiredMgr, roots: ca, expectNode: "node-a", serverCert: good, serverCA: ca, wantErr: "expired"},
		{name: "client cert that is not the Manager's", clientCert: notMgr, roots: ca, expectNode: "node-a", serverCert: good, serverCA: ca, wantErr: "not the Manager's"},
		{name: "no client cert", clientCert: nil, roots: ca, expectNode: "node-a", serverCert: good, serverCA: ca, wantErr: "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			get := func() (*tls.Certificate, error) {
				if tc.clientCert == nil {
					return &tls.Certificate{}, nil
				}
				c := tc.clientCert.TLSCertificate()
				return &c, nil
			}
			client := ManagerClientConfig(tc.roots.Pool(), get, tc.expectNode)
			sc := tc.serverCert.TLSCertificate()
			server := WorkerServerConfig(func() (*tls.Certificate, *x509.CertPool) { return &sc, tc.serverCA.Pool() })
			cerr, serr := handshake(t, client, server)
			if tc.wantErr == "" {
				if cerr != nil || serr != nil {
					t.Fatalf("client: %v; server: %v", cerr, serr)
				}
				return
			}
			if cerr == nil || serr == nil {
				t.Fatalf("handshake succeeded (client %v, server %v); want a failure with %q", cerr, serr, tc.wantErr)
			}
			if !strings.Contains(cerr.Error(), tc.wantErr) && !strings.Contains(serr.Error(), tc.wantErr) {
				t.Errorf("client: %v; server: %v; want %q in one", cerr, serr, tc.wantErr)
			}
		})
	}

	t.Run("worker without a certificate yet", func(t *testing.T) {
		get := func() (*tls.Certificate, error) { c := mgr.TLSCertificate(); return &c, nil }
		server := WorkerServerConfig(func() (*tls.Certificate, *x509.CertPool) { return nil, nil })
		if cerr, serr := handshake(t, ManagerClientConfig(ca.Pool(), get, "node-a"), server); cerr == nil || serr == nil {
			t.Fatal("handshake succeeded")
		}
	})
}

func TestAPIServerPinning(t *testing.T) {
	ca := newCA(t)
	otherCA := newCA(t)
	srv, err := IssueServer(ca, []string{"mgr.example.com"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expired := issueRaw(t, ca, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		c.DNSNames = []string{"mgr.example.com"}
	})
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	otherFile := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(otherFile, otherCA.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		opts    certpin.Options
		serve   *Leaf
		host    string
		wantErr string
	}{
		{name: "pinned CA", opts: certpin.Options{Fingerprint: ca.Fingerprint()}, serve: srv, host: "mgr.example.com"},
		{name: "pinned CA, by IP", opts: certpin.Options{Fingerprint: ca.Fingerprint()}, serve: srv, host: "127.0.0.1"},
		{name: "CA file", opts: certpin.Options{CAFile: caFile}, serve: srv, host: "mgr.example.com"},
		{name: "CA file and pin", opts: certpin.Options{CAFile: caFile, Fingerprint: ca.Fingerprint()}, serve: srv, host: "mgr.example.com"},
		{name: "wrong pin", opts: certpin.Options{Fingerprint: otherCA.Fingerprint()}, serve: srv, host: "mgr.example.com", wantErr: "does not contain the pinned CA"},
		{name: "wrong CA file", opts: certpin.Options{CAFile: otherFile}, serve: srv, host: "mgr.example.com", wantErr: "unknown authority"},
		{name: "wrong host", opts: certpin.Options{Fingerprint: ca.Fingerprint()}, serve: srv, host: "evil.example.com", wantErr: "evil.example.com"},
		{name: "expired", opts: certpin.Options{Fingerprint: ca.Fingerprint()}, serve: expired, host: "mgr.example.com", wantErr: "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, err := certpin.ClientConfig(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			client.ServerName = tc.host
			server := APIServerConfig(Static(tc.serve.TLSCertificate()))
			cerr, _ := handshake(t, client, server)
			if tc.wantErr == "" {
				if cerr != nil {
					t.Fatal(cerr)
				}
				return
			}
			if cerr == nil || !strings.Contains(cerr.Error(), tc.wantErr) {
				t.Fatalf("client error %v, want %q", cerr, tc.wantErr)
			}
		})
	}
	if _, err := certpin.ClientConfig(certpin.Options{CAFile: otherFile, Fingerprint: ca.Fingerprint()}); err == nil {
		t.Error("a CA file without the pinned CA was accepted")
	}
}

// FuzzSignWorkerCSR: whatever a worker sends as its CSR, signing it never
// panics, and anything signed is a certificate for the node.
func FuzzSignWorkerCSR(f *testing.F) {
	ca, err := InitCA(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	key, _ := NewKey()
	csr, _ := CreateCSR(key, "x")
	f.Add(csr)
	f.Add([]byte{})
	f.Add([]byte{0x30, 0x82, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		der, err := SignWorkerCSR(ca, b, "n1", "10.0.0.1", time.Hour)
		if err != nil {
			return
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := NodeIDOf(c); !ok || id != "n1" {
			t.Fatalf("signed a certificate for %q", id)
		}
	})
}
