package hostagent

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/chsim"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudhypervisor"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

// registrar is a Manager endpoint answering RegisterHostAgent over the
// real Connect protocol (test equipment): the one-shot token "nht_ok",
// and, given a CSR, a certificate the CA signs with pki's signer.
type registrar struct {
	managerv1connect.UnimplementedManagerHandler
	ca *pki.CA

	mu    sync.Mutex
	last  *managerv1.RegisterHostAgentRequest
	calls int
}

func (r *registrar) RegisterHostAgent(_ context.Context, req *connect.Request[managerv1.RegisterHostAgentRequest]) (*connect.Response[managerv1.RegisterHostAgentResponse], error) {
	ttl := time.Hour
	switch req.Header().Get("Authorization") {
	case "Bearer nht_ok":
	case "Bearer nhs_secret": // a renewal: a day, so the fake clock leaves it alone
		ttl = 24 * time.Hour
	default:
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("token"))
	}
	r.mu.Lock()
	r.last = req.Msg
	r.calls++
	r.mu.Unlock()
	out := &managerv1.RegisterHostAgentResponse{HostSecret: "nhs_secret"}
	if len(req.Msg.GetCsrDer()) > 0 && r.ca != nil {
		u, _ := url.Parse(req.Msg.GetUrl())
		der, err := pki.SignHostAgentCSR(r.ca, req.Msg.GetCsrDer(), req.Msg.GetName(), u.Hostname(), ttl)
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		out.CertificateDer, out.CaCertificatesDer = der, [][]byte{r.ca.Cert.Raw}
	}
	return connect.NewResponse(out), nil
}

// serveRegistrar serves r on loopback: https with a server certificate of
// r.ca when it has one, else http. It returns the URL.
func serveRegistrar(t *testing.T, r *registrar) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(managerv1connect.NewManagerHandler(r))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	scheme := "http://"
	if r.ca != nil {
		leaf, err := pki.IssueServer(r.ca, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ln = tls.NewListener(ln, pki.APIServerConfig(pki.Static(leaf.TLSCertificate())))
		scheme = "https://"
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return scheme + ln.Addr().String()
}

// getHost asks the agent at u for its host over tc (nil: cleartext).
func getHost(u string, tc *tls.Config) error {
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := managerv1connect.NewHostAgentClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}, u)
	req := connect.NewRequest(&managerv1.GetHostRequest{})
	req.Header().Set("Authorization", "Bearer nhs_secret")
	_, err := c.GetHost(context.Background(), req)
	return err
}

// A host agent registering with an https Manager sends a CSR and serves
// mutual TLS with the certificate the cluster CA signed: the provider
// reaches it with the Manager's client certificate; a client without that
// certificate (none, another CA's, a CA-signed one that is not the
// Manager's) is refused, as is cleartext; the provider refuses an agent
// whose certificate names another host. Restarted, the agent serves the
// kept certificate.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca, err := pki.InitCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &registrar{ca: ca}
	mgrURL := serveRegistrar(t, r)
	vmms := &chsim.Launcher{Runner: &nopRunner{}}
	t.Cleanup(vmms.Close)
	cfg := testConfig(t, vmms)
	cfg.Token = ""
	cfg.Register = &Registration{ManagerURLs: []string{mgrURL}, Token: "nht_ok", TLS: certpin.Options{Fingerprint: ca.Fingerprint()}}
	a, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })

	// Registration gave a certificate: the agent advertised https and
	// serves it.
	if !strings.HasPrefix(a.URL(), "https://") || len(r.last.GetCsrDer()) == 0 || r.last.GetUrl() != a.URL() {
		t.Fatalf("URL %s; the Manager was sent url %q and a CSR of %d bytes", a.URL(), r.last.GetUrl(), len(r.last.GetCsrDer()))
	}
	kept, err := os.ReadFile(filepath.Join(cfg.Dir, "tls", "host.pem"))
	if err != nil {
		t.Fatal(err)
	}
	certs, err := certpin.ParsePEMCertificates(kept)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := pki.HostAgentOf(certs[0]); !ok || name != "enc-01" {
		t.Errorf("the kept certificate names host %q", name)
	}

	mgr, err := pki.IssueClient(ca, "m")
	if err != nil {
		t.Fatal(err)
	}
	// The provider reaches the agent with the Manager's client certificate.
	p, err := cloudhypervisor.New(cloudconf.CloudHypervisor{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.SetRegistered(func() map[string]cloudhypervisor.Host {
		return map[string]cloudhypervisor.Host{"enc-01": {URL: a.URL(), Secret: "nhs_secret"}, "enc-02": {URL: a.URL(), Secret: "nhs_secret"}}
	})
	p.SetTLS(func(host string) *tls.Config {
		return pki.HostAgentClientConfig(ca.Pool(), pki.Static(mgr.TLSCertificate()), host)
	})
	if h, err := p.Host(context.Background(), "enc-01"); err != nil || h.GetName() != "enc-01" {
		t.Fatalf("the provider over mutual TLS: %v, %v", h, err)
	}
	// The agent's certificate names enc-01: dialled as enc-02, refused.
	if _, err := p.Host(context.Background(), "enc-02"); err == nil || !strings.Contains(err.Error(), `for host "enc-01", not "enc-02"`) {
		t.Errorf("the agent dialled as another host: %v", err)
	}

	other, err := pki.InitCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	otherMgr, err := pki.IssueClient(other, "m")
	if err != nil {
		t.Fatal(err)
	}
	member, err := pki.IssueMember(ca, "m1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	skip := func(cs tls.ConnectionState) error {
		return pki.VerifyHostAgent(cs.PeerCertificates, ca.Pool(), "enc-01")
	}
	for _, tc := range []struct {
		name string
		cert []tls.Certificate
	}{
		{"no client certificate", nil},
		{"another CA's Manager certificate", []tls.Certificate{otherMgr.TLSCertificate()}},
		{"the CA's, but not the Manager's", []tls.Certificate{member.TLSCertificate()}},
	} {
		cc := &tls.Config{Certificates: tc.cert, InsecureSkipVerify: true, VerifyConnection: skip, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
		// The bearer token is right, so any error is the connection's: the
		// handshake refused it (the client may see the alert, or its write
		// fail, depending on when the server's verdict arrives).
		if err := getHost(a.URL(), cc); err == nil || connect.CodeOf(err) == connect.CodeUnauthenticated {
			t.Errorf("%s: %v, want the connection refused", tc.name, err)
		}
	}
	if err := getHost("http://"+a.Addr(), nil); err == nil || connect.CodeOf(err) == connect.CodeUnauthenticated {
		t.Error("cleartext to a TLS agent: served")
	}

	// Restarted (no registration: the secret and certificate are kept), it
	// serves mutual TLS again.
	_ = a.Close()
	cfg.Register, cfg.Listen = nil, a.Addr()
	b, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if b.URL() != a.URL() {
		t.Errorf("restarted at %s, was %s", b.URL(), a.URL())
	}
	if _, err := p.Host(context.Background(), "enc-01"); err != nil {
		t.Errorf("the restarted agent: %v", err)
	}
}

// On loopback an agent registered with an http Manager (no CA) serves
// cleartext, as before; off loopback an agent with no certificate refuses
// to start unless told to serve cleartext.
func TestPlaintext(t *testing.T) {
	t.Parallel()
	r := &registrar{}
	mgrURL := serveRegistrar(t, r)
	vmms := &chsim.Launcher{Runner: &nopRunner{}}
	t.Cleanup(vmms.Close)
	cfg := testConfig(t, vmms)
	cfg.Token = ""
	cfg.Register = &Registration{ManagerURLs: []string{mgrURL}, Token: "nht_ok"}
	a, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	if !strings.HasPrefix(a.URL(), "http://") || len(r.last.GetCsrDer()) != 0 || r.last.GetUrl() != a.URL() {
		t.Fatalf("URL %s; sent url %q, a CSR of %d bytes", a.URL(), r.last.GetUrl(), len(r.last.GetCsrDer()))
	}
	if err := getHost(a.URL(), nil); err != nil {
		t.Errorf("cleartext on loopback: %v", err)
	}
	p, err := cloudhypervisor.New(cloudconf.CloudHypervisor{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.SetRegistered(func() map[string]cloudhypervisor.Host {
		return map[string]cloudhypervisor.Host{"enc-01": {URL: a.URL(), Secret: "nhs_secret"}}
	})
	p.SetTLS(func(string) *tls.Config { t.Error("TLS asked for an http agent"); return nil })
	if _, err := p.Host(context.Background(), "enc-01"); err != nil {
		t.Errorf("the provider, cleartext on loopback: %v", err)
	}

	off := testConfig(t, vmms)
	off.Listen = "0.0.0.0:0"
	if b, err := Start(off); err == nil || !strings.Contains(err.Error(), "off loopback") {
		if b != nil {
			_ = b.Close()
		}
		t.Errorf("cleartext off loopback: %v, want a refusal", err)
	}
	off.AllowPlaintext = true
	b, err := Start(off)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if !strings.HasPrefix(b.URL(), "http://") {
		t.Errorf("URL %s", b.URL())
	}
}

// Two thirds into its certificate's life, the agent registers again with
// its host secret and serves the new certificate (kept for the next start).
func TestRenewal(t *testing.T) {
	t.Parallel()
	ca, err := pki.InitCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &registrar{ca: ca}
	mgrURL := serveRegistrar(t, r)
	vmms := &chsim.Launcher{Runner: &nopRunner{}}
	t.Cleanup(vmms.Close)
	fake := clock.NewFake(time.Now())
	cfg := testConfig(t, vmms)
	cfg.Token, cfg.Clock, cfg.MetricsListen = "", fake, "127.0.0.1:0"
	cfg.Register = &Registration{ManagerURLs: []string{mgrURL}, Token: "nht_ok", TLS: certpin.Options{Fingerprint: ca.Fingerprint()}}
	a, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	first, _ := a.served.State()
	<-fake.TimerCreated() // the renewal loop waits for its due time
	fake.Advance(45 * time.Minute)
	// The renewal is done once the new certificate is served, kept on
	// disk and counted — three steps of the agent's own goroutine, seen
	// here in any order: wait for all of them.
	wantMetrics := []string{`norsk_host_agent_tls_renewals_total{outcome="ok"} 1`, "norsk_host_agent_tls_certificate_expiry_timestamp_seconds "}
	renewed := func() (served, kept, counted bool) {
		if c, _ := a.served.State(); c != nil && c.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
			served = true
			if life := c.Leaf.NotAfter.Sub(c.Leaf.NotBefore); life < 24*time.Hour {
				t.Errorf("the renewed certificate lives %v", life)
			}
		}
		if b, err := os.ReadFile(filepath.Join(cfg.Dir, "tls", "host.pem")); err == nil {
			if certs, err := certpin.ParsePEMCertificates(b); err == nil && len(certs) > 0 && certs[0].SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
				kept = true
			}
		}
		// The metrics are served in cleartext on the metrics listener (the
		// API's listener wants the Manager's certificate).
		if resp, err := http.Get("http://" + a.MetricsAddr() + "/metrics"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			counted = true
			for _, want := range wantMetrics {
				counted = counted && strings.Contains(string(body), want)
			}
		}
		return served, kept, counted
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		served, kept, counted := renewed()
		if served && kept && counted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the renewal's due time: new certificate served %v, kept %v, metrics %v", served, kept, counted)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	if r.calls != 2 || r.last.GetUrl() != a.URL() || len(r.last.GetCsrDer()) == 0 {
		t.Errorf("%d registrations, the last with url %q", r.calls, r.last.GetUrl())
	}
	r.mu.Unlock()
}
