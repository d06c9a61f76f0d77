package worker

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/pki"
)

// tlsAgent is an agent of an https Manager with its TLS initialised.
func tlsAgent(t *testing.T, dir string) *Agent {
	t.Helper()
	a, err := New(Config{ManagerURL: "https://manager.example:6790", DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.initTLS(); err != nil {
		t.Fatal(err)
	}
	return a
}

// answer is a registration answer signing the agent's CSR with ca.
func answer(t *testing.T, a *Agent, ca *pki.CA, nodeID string) *managerv1.ClusterMemberRegisterResponse {
	t.Helper()
	der, err := pki.SignWorkerCSR(ca, a.csrDER(), nodeID, "127.0.0.1:1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &managerv1.ClusterMemberRegisterResponse{NodeId: nodeID, CertificateDer: der, CaCertificatesDer: [][]byte{ca.Cert.Raw}}
}

// get makes one request to the agent's listener with the given client TLS
// (nil: plaintext).
func get(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true, Protocols: &p}
	defer tr.CloseIdleConnections()
	scheme := "http://"
	if cfg != nil {
		scheme = "https://"
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(scheme + addr + "/")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

func TestWorkerTLSLifecycle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := pki.InitCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := pki.IssueClient(ca, "m")
	if err != nil {
		t.Fatal(err)
	}
	a := tlsAgent(t, dir)
	if st, err := os.Stat(filepath.Join(dir, "tls", tlsKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	if len(a.csrDER()) == 0 || a.registerRequest("tok", "").GetCsrDer() == nil {
		t.Fatal("no CSR in the registration request")
	}
	if a.tlsw.serving() {
		t.Fatal("serving TLS before any certificate")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
	go func() { _ = srv.Serve(a.tlsListener(ln)) }()
	defer srv.Close()
	addr := ln.Addr().String()
	asManager := pki.ManagerClientConfig(ca.Pool(), pki.Static(mgr.TLSCertificate()), "node-1")

	// Before a certificate: cleartext.
	if err := get(t, addr, nil); err != nil {
		t.Fatalf("cleartext before a certificate: %v", err)
	}

	// A certificate for another key is refused; the agent stays cleartext.
	other := tlsAgent(t, t.TempDir())
	a.onRegistered(answer(t, other, ca, "node-1"))
	if a.tlsw.serving() {
		t.Fatal("installed a certificate for another key")
	}
	// One naming another node too.
	resp := answer(t, a, ca, "node-2")
	resp.NodeId = "node-1"
	a.onRegistered(resp)
	if a.tlsw.serving() {
		t.Fatal("installed a certificate naming another node")
	}

	// The real one: TLS, only for the Manager.
	a.onRegistered(answer(t, a, ca, "node-1"))
	if !a.tlsw.serving() {
		t.Fatal("not serving TLS after a certificate")
	}
	if err := get(t, addr, asManager); err != nil {
		t.Fatalf("the Manager is refused: %v", err)
	}
	if err := get(t, addr, nil); err == nil {
		t.Fatal("cleartext accepted while serving TLS")
	}
	noCert := pki.ManagerClientConfig(ca.Pool(), func() (*tls.Certificate, error) { return &tls.Certificate{}, nil }, "node-1")
	if err := get(t, addr, noCert); err == nil {
		t.Fatal("a client without a certificate was accepted")
	}
	if err := get(t, addr, pki.ManagerClientConfig(ca.Pool(), pki.Static(mgr.TLSCertificate()), "node-9")); err == nil {
		t.Fatal("the Manager accepted a worker that is another node")
	}

	// A restart serves the stored certificate at once.
	b := tlsAgent(t, dir)
	if !b.tlsw.serving() {
		t.Fatal("the stored certificate was not loaded")
	}
	c1, _ := a.tlsw.state()
	c2, _ := b.tlsw.state()
	if !c1.Leaf.Equal(c2.Leaf) {
		t.Fatal("a restart loaded another certificate")
	}

	// A renewal replaces it for new connections.
	a.onRegistered(answer(t, a, ca, "node-1"))
	c3, _ := a.tlsw.state()
	if c3.Leaf.Equal(c1.Leaf) {
		t.Fatal("a new certificate was not installed")
	}

	// A Manager that answers without a certificate puts the stream back to
	// cleartext, and a restart stays there.
	a.onRegistered(&managerv1.ClusterMemberRegisterResponse{NodeId: "node-1"})
	if a.tlsw.serving() {
		t.Fatal("still TLS after an answer without a certificate")
	}
	if err := get(t, addr, nil); err != nil {
		t.Fatalf("cleartext after the Manager dropped TLS: %v", err)
	}
	if tlsAgent(t, dir).tlsw.serving() {
		t.Fatal("a restart serves a certificate the Manager withdrew")
	}
}

func TestWorkerTLSConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"hash with https", Config{ManagerURL: "https://m:1", DataDir: "d", TLSCAHash: "sha256:" + hex64()}, true},
		{"hash with http", Config{ManagerURL: "http://m:1", DataDir: "d", TLSCAHash: "sha256:" + hex64()}, false},
		{"bad hash", Config{ManagerURL: "https://m:1", DataDir: "d", TLSCAHash: "sha256:12"}, false},
		{"missing CA file", Config{ManagerURL: "https://m:1", DataDir: "d", TLSCAFile: "/nonexistent/ca.pem"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("New: %v, want ok=%v", err, tc.ok)
			}
		})
	}
	// Without TLS a registration carries no CSR.
	a, err := New(Config{ManagerURL: "http://m:1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.initTLS(); err != nil {
		t.Fatal(err)
	}
	if a.csrDER() != nil {
		t.Fatal("a CSR for an http Manager")
	}
	if _, err := os.Stat(filepath.Join(a.cfg.DataDir, "tls")); !os.IsNotExist(err) {
		t.Fatal("an http worker made a TLS directory")
	}
}

func hex64() string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = 'a'
	}
	return string(b)
}
