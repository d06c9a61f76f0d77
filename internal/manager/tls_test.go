package manager

import (
	"bytes"
	"context"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

func TestTLSModes(t *testing.T) {
	t.Parallel()
	loop := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}
	public := &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 1}
	unspecified := &net.TCPAddr{IP: net.IPv4zero, Port: 1}
	for _, tc := range []struct {
		mode    string
		addr    net.Addr
		on      bool
		warn    bool
		wantErr bool
	}{
		{mode: "", addr: loop, on: false},
		{mode: "auto", addr: loop, on: false},
		{mode: "auto", addr: public, on: true},
		{mode: "", addr: unspecified, on: true},
		{mode: "on", addr: loop, on: true},
		{mode: "off", addr: loop, on: false},
		{mode: "off", addr: public, on: false, warn: true},
		{mode: "yes", addr: loop, wantErr: true},
	} {
		var logs bytes.Buffer
		cfg := Config{TLS: tc.mode}
		on, err := cfg.tlsOn(tc.addr, slog.New(slog.NewTextHandler(&logs, nil)))
		if (err != nil) != tc.wantErr || on != tc.on {
			t.Errorf("TLS %q on %s: on=%v err=%v; want on=%v err=%v", tc.mode, tc.addr, on, err, tc.on, tc.wantErr)
		}
		if got := strings.Contains(logs.String(), "TLS IS OFF"); got != tc.warn {
			t.Errorf("TLS %q on %s: warned=%v, want %v (%s)", tc.mode, tc.addr, got, tc.warn, logs.String())
		}
	}
}

func TestSetupTLSFiles(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	addr := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 6790}
	dir := t.TempDir()
	cfg := Config{DataDir: dir, TLS: TLSOn, NodeName: "m1", TLSHosts: []string{"mgr.example.com"}}

	for _, bad := range []Config{
		{DataDir: dir, TLS: TLSOn, TLSCertFile: "x.pem"},
		{DataDir: dir, TLS: TLSOn, TLSCAFile: "ca.pem"},
	} {
		if _, err := setupTLS(&bad, addr, log); err == nil {
			t.Errorf("setupTLS(%+v): no error", bad)
		}
	}

	// First start: a CA and an API certificate in <data-dir>/tls.
	t1, err := setupTLS(&cfg, addr, log)
	if err != nil {
		t.Fatal(err)
	}
	if !t1.on || t1.ca == nil || t1.fingerprint != t1.ca.Fingerprint() {
		t.Fatalf("state %+v", t1)
	}
	leaf1, err := pki.LoadLeaf(filepath.Join(dir, "tls", pki.ServerCertFile), filepath.Join(dir, "tls", pki.ServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if !pki.Covers(leaf1.Cert, []string{"mgr.example.com", "127.0.0.1"}) {
		t.Fatalf("API certificate hosts %v", pki.Hosts(leaf1.Cert))
	}
	cc, err := t1.clientCert()
	if err != nil || !pki.IsManager(cc.Leaf) {
		t.Fatalf("client certificate: %v", err)
	}

	// Second start: the same CA and certificate.
	t2, err := setupTLS(&cfg, addr, log)
	if err != nil {
		t.Fatal(err)
	}
	leaf2, _ := pki.LoadLeaf(filepath.Join(dir, "tls", pki.ServerCertFile), filepath.Join(dir, "tls", pki.ServerKeyFile))
	if t2.fingerprint != t1.fingerprint || !leaf2.Cert.Equal(leaf1.Cert) {
		t.Fatal("a restart changed the CA or the API certificate")
	}

	// A new host: a new certificate covering old and new.
	cfg.TLSHosts = []string{"other.example.com"}
	if _, err := setupTLS(&cfg, addr, log); err != nil {
		t.Fatal(err)
	}
	leaf3, _ := pki.LoadLeaf(filepath.Join(dir, "tls", pki.ServerCertFile), filepath.Join(dir, "tls", pki.ServerKeyFile))
	if leaf3.Cert.Equal(leaf1.Cert) || !pki.Covers(leaf3.Cert, []string{"mgr.example.com", "other.example.com"}) {
		t.Fatalf("after a new host: %v", pki.Hosts(leaf3.Cert))
	}

	// Bring your own: an operator's CA and an API certificate it issued.
	own, err := pki.InitCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	apiLeaf, err := pki.IssueServer(own, []string{"api.example.com"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	certPath, keyPath := filepath.Join(files, "api.pem"), filepath.Join(files, "api-key.pem")
	if err := apiLeaf.WriteFiles(certPath, keyPath); err != nil {
		t.Fatal(err)
	}
	byo := Config{DataDir: t.TempDir(), TLS: TLSOn, TLSCertFile: certPath, TLSKeyFile: keyPath,
		TLSCAFile: filepath.Join(own.Dir, pki.CACertFile), TLSCAKeyFile: filepath.Join(own.Dir, pki.CAKeyFile)}
	t4, err := setupTLS(&byo, addr, log)
	if err != nil {
		t.Fatal(err)
	}
	if t4.ca.Fingerprint() != own.Fingerprint() || t4.fingerprint != own.Fingerprint() {
		t.Error("bring-your-own CA not used")
	}
	if _, err := os.Stat(filepath.Join(byo.DataDir, "tls", pki.CACertFile)); err == nil {
		t.Error("an automatic CA was made although one was given")
	}
	// An API certificate of a CA the Manager does not hold, with no root in
	// its chain: no fingerprint to announce; workers' streams use the
	// automatic CA.
	leafOnly := filepath.Join(files, "leaf-only.pem")
	if err := os.WriteFile(leafOnly, pki.CertPEM(apiLeaf.Chain[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	byo2 := Config{DataDir: t.TempDir(), TLS: TLSOn, TLSCertFile: leafOnly, TLSKeyFile: keyPath}
	t5, err := setupTLS(&byo2, addr, log)
	if err != nil {
		t.Fatal(err)
	}
	if t5.fingerprint != "" || t5.ca == nil || t5.ca.Fingerprint() == own.Fingerprint() {
		t.Errorf("fingerprint %q, ca %v", t5.fingerprint, t5.ca)
	}
	// The same certificate with its root in the chain: the root is pinned.
	byo2.TLSCertFile = certPath
	t6, err := setupTLS(&byo2, addr, log)
	if err != nil {
		t.Fatal(err)
	}
	if t6.fingerprint != own.Fingerprint() {
		t.Errorf("fingerprint %q, want the chain's root %s", t6.fingerprint, own.Fingerprint())
	}
}

// ClusterMemberRegister signs a CSR with the cluster CA when the Manager
// serves TLS and records that the node's stream is TLS; a bad CSR is
// INVALID_ARGUMENT and uses nothing up (the token still works).
func TestRegisterSignsCSR(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok := auth.NewToken()
	s, err := New(ctx, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NodeName: "m1", TLS: TLSOn, Logger: slog.New(slog.DiscardHandler), BootstrapToken: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.URL(), "https://") {
		t.Fatalf("URL %s", s.URL())
	}
	tc, err := certpin.ClientConfig(certpin.Options{Fingerprint: s.CAFingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	hc := nodes.TLSClient(tc)
	defer hc.CloseIdleConnections()
	api := managerv1connect.NewManagerClient(hc, s.URL(), connect.WithGRPC(), auth.WithBearer(tok))
	hello, err := api.Hello(ctx, connect.NewRequest(&managerv1.HelloRequest{}))
	if err != nil || hello.Msg.GetCaFingerprint() != s.CAFingerprint() {
		t.Fatalf("hello: %v %v", hello, err)
	}
	slot, err := api.RegisterClusterNode(ctx, connect.NewRequest(&managerv1.RegisterClusterNodeRequest{NodeName: "w1"}))
	if err != nil {
		t.Fatal(err)
	}
	register := func(csr []byte, secret string) (*managerv1.ClusterMemberRegisterResponse, error) {
		req := connect.NewRequest(&managerv1.ClusterMemberRegisterRequest{NodeSecret: secret, Address: "127.0.0.1:1", CsrDer: csr, Runtime: "process"})
		if secret == "" {
			req.Msg.Token = slot.Msg.GetToken()
		}
		cred := req.Msg.GetToken() + secret
		req.Header().Set("Authorization", "Bearer "+cred)
		resp, err := api.ClusterMemberRegister(ctx, req)
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	if _, err := register([]byte("not a csr"), ""); code(err) != connect.CodeInvalidArgument {
		t.Fatalf("bad CSR: %v, want INVALID_ARGUMENT", err)
	}
	key, _ := pki.NewKey()
	csr, _ := pki.CreateCSR(key, "w1")
	resp, err := register(csr, "")
	if err != nil {
		t.Fatalf("register after a refused CSR: %v", err)
	}
	if len(resp.GetCertificateDer()) == 0 || len(resp.GetCaCertificatesDer()) != 1 {
		t.Fatal("no certificate in the answer")
	}
	ca, err := pki.LoadCA(filepath.Join(s.cfg.DataDir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.VerifyWorker(mustParse(t, resp.GetCertificateDer()), ca.Pool(), resp.GetNodeId()); err != nil {
		t.Fatal(err)
	}
	if !s.st().State().Snapshot().Node(nil, resp.GetNodeId()).GetNode().GetTls() {
		t.Fatal("the node is not recorded as TLS")
	}
	// Without a CSR (a worker of an http URL behind a TLS proxy): no
	// certificate and a cleartext stream.
	resp2, err := register(nil, resp.GetNodeSecret())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp2.GetCertificateDer()) != 0 || s.st().State().Snapshot().Node(nil, resp.GetNodeId()).GetNode().GetTls() {
		t.Fatal("a registration without a CSR left the node on TLS")
	}
}

func mustParse(t *testing.T, der []byte) []*x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return []*x509.Certificate{c}
}
