package tests

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// A Manager with TLS forced on (on loopback) serves only TLS: a plaintext
// client is refused, the SDK trusts it by CA file or by the CA's pinned
// fingerprint, and a wrong pin or no trust at all fails. The fingerprint
// the Manager announces in its hello is its CA's, and it survives a
// restart (the CA is made once, in <data-dir>/tls).
func TestTLSManagerAPI(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{TLS: "on"})
	x := ctx(t)
	url := c.URL()
	if !strings.HasPrefix(url, "https://127.0.0.1:") {
		t.Fatalf("URL %s, want https on loopback", url)
	}
	m := c.Manager()
	if !m.TLSEnabled() {
		t.Fatal("TLS not enabled")
	}
	caPEM := m.CACertPEM()
	caCerts, err := certpin.ParsePEMCertificates(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	fp := m.CAFingerprint()
	if fp != pki.Fingerprint(caCerts[0].Raw) {
		t.Fatalf("announced fingerprint %s is not the CA's %s", fp, pki.Fingerprint(caCerts[0].Raw))
	}
	if got := c.Client().Hello().GetCaFingerprint(); got != fp {
		t.Errorf("hello ca_fingerprint = %q, want %q", got, fp)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(c.Dir, "manager", "tls", pki.CAKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the CA key in <data-dir>/tls: %v, %v (want mode 0600)", st, err)
	}

	connectWith := func(s norsk.Settings) error {
		s.Token = c.Token()
		s.Logger = nil
		cctx, cancel := context.WithTimeout(x, 10*time.Second)
		defer cancel()
		m, err := norsk.Connect(cctx, s)
		if err == nil {
			_ = m.Close()
		}
		return err
	}
	plain := "http://" + m.Addr()
	for _, tc := range []struct {
		name    string
		s       norsk.Settings
		wantErr string
	}{
		{name: "pinned CA", s: norsk.Settings{URL: url, CAFingerprint: fp}},
		{name: "pinned CA, upper case with colons", s: norsk.Settings{URL: url, CAFingerprint: colons(fp)}},
		{name: "CA file", s: norsk.Settings{URL: url, CAFile: caFile}},
		{name: "CA file and pin", s: norsk.Settings{URL: url, CAFile: caFile, CAFingerprint: fp}},
		{name: "wrong pin", s: norsk.Settings{URL: url, CAFingerprint: "sha256:" + strings.Repeat("ab", 32)}, wantErr: "pinned CA"},
		{name: "system roots", s: norsk.Settings{URL: url}, wantErr: "certificate"},
		{name: "plaintext client", s: norsk.Settings{URL: plain}, wantErr: "connect to"},
		{name: "pin with an http URL", s: norsk.Settings{URL: plain, CAFingerprint: fp}, wantErr: "not https"},
		{name: "malformed pin", s: norsk.Settings{URL: url, CAFingerprint: "sha256:beef"}, wantErr: "64 hex digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := connectWith(tc.s)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}

	// Plain HTTP/1.1 (curl without https) is told what is wrong.
	resp, err := http.Get(plain + "/healthz")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
			t.Errorf("plain GET /healthz: %d %q", resp.StatusCode, body)
		}
	}
	// Over TLS, /healthz answers.
	tc, err := certpin.ClientConfig(certpin.Options{Fingerprint: fp})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err = hc.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz over TLS: %d", resp.StatusCode)
	}

	// The CLI pins the CA with --tls-ca-hash and prints it in the worker
	// command of slot register.
	n := ctl{t: t, url: url, token: c.Token()}
	out := n.ok("--tls-ca-hash", fp, "slot", "register", "edge-1")
	if !strings.Contains(out, "--manager-url "+url+" --tls-ca-hash "+fp) {
		t.Errorf("slot register does not print the pinned worker command:\n%s", out)
	}
	if code, _, errOut := n.run("", "--tls-ca", caFile, "slot", "list"); code != 0 {
		t.Errorf("norsk-ctl --tls-ca: exit %d: %s", code, errOut)
	}
	if code, _, errOut := n.run("", "slot", "list"); code == 0 || !strings.Contains(errOut, "certificate") {
		t.Errorf("norsk-ctl without trust: exit %d: %s", code, errOut)
	}

	// A restart keeps the CA: pins stay valid.
	c.RestartManager()
	if got := c.Manager().CAFingerprint(); got != fp {
		t.Fatalf("after a restart the CA fingerprint is %s, was %s", got, fp)
	}
	if err := connectWith(norsk.Settings{URL: c.URL(), CAFingerprint: fp}); err != nil {
		t.Fatalf("pinned connect after restart: %v", err)
	}
}

// colons writes a fingerprint as openssl does: upper case, bytes
// separated by colons.
func colons(fp string) string {
	h := strings.ToUpper(strings.TrimPrefix(fp, "sha256:"))
	var parts []string
	for i := 0; i < len(h); i += 2 {
		parts = append(parts, h[i:i+2])
	}
	return "sha256:" + strings.Join(parts, ":")
}

// A worker registering with a TLS Manager gets a certificate for its key
// (kept in its data directory), serves its NodeController stream with
// mutual TLS, and the Manager drives it over that stream: a job is created
// and runs. Nobody without the Manager's client certificate opens the
// worker's stream — not a plaintext client, not one without a certificate,
// not one with a certificate of another CA — even holding the node secret.
// A restarted worker gets a fresh certificate at its re-registration and
// the Manager reconnects over mutual TLS.
func TestTLSWorkerStream(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1, TLS: "on"})
	cl, x := c.Client(), ctx(t)
	w := c.Worker("worker-1")

	n := c.Node("worker-1")
	if !n.GetTls() || !n.GetConnected() {
		t.Fatalf("node tls=%v connected=%v, want a connected TLS stream", n.GetTls(), n.GetConnected())
	}
	tlsDir := filepath.Join(w.Dir, "tls")
	if st, err := os.Stat(filepath.Join(tlsDir, "node-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("worker key: %v, %v (want mode 0600)", st, err)
	}
	cert1 := readCert(t, filepath.Join(tlsDir, "node.pem"))
	if id, ok := pki.NodeIDOf(cert1); !ok || id != "worker-1" {
		t.Fatalf("worker certificate names %q (%v), want worker-1", id, ok)
	}

	// The job lifecycle over the mutual-TLS stream.
	if _, err := cl.CreateJob(x, progJob(t, "tls-1", runtimetest.Behaviour{Listen: 8080}, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "tls-1", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	in := c.WaitPhase("tls-1", "primary", norsk.InstancePhaseRunning)
	u := firstURL(in)
	c.Eventually("the service to answer at "+u, func() bool { return reachable(u) })

	// Strangers cannot open the worker's stream.
	id, err := worker.LoadIdentity(w.Dir)
	if err != nil || id == nil {
		t.Fatalf("identity: %v", err)
	}
	addr := w.Agent().AdvertiseAddr()
	ca, err := pki.LoadCA(filepath.Join(c.Dir, "manager", "tls"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.InitCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := pki.IssueClient(other, "impostor")
	if err != nil {
		t.Fatal(err)
	}
	noCert := func() (*tls.Certificate, error) { return &tls.Certificate{}, nil }
	for _, tc := range []struct {
		name string
		hc   *http.Client
		base string
	}{
		{name: "plaintext", hc: nodes.H2CClient(), base: "http://" + addr},
		{name: "TLS without a client certificate", hc: nodes.TLSClient(pki.ManagerClientConfig(ca.Pool(), noCert, "worker-1")), base: "https://" + addr},
		{name: "TLS with another CA's Manager certificate", hc: nodes.TLSClient(pki.ManagerClientConfig(ca.Pool(), pki.Static(foreign.TLSCertificate()), "worker-1")), base: "https://" + addr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := openControl(x, tc.hc, tc.base, id.NodeSecret)
			if err == nil {
				t.Fatal("the stream opened")
			}
			t.Logf("refused: %v", err)
		})
	}
	if !c.Node("worker-1").GetConnected() {
		t.Error("the Manager's own stream dropped")
	}

	// A restarted worker re-registers and is certified again.
	w.Restart()
	c.Eventually("worker-1 to be connected again", func() bool {
		n := c.Node("worker-1")
		return n.GetConnected() && n.GetTls()
	})
	// The restarted worker serves its stored certificate at once (the
	// Manager may reconnect with it) and gets a new one when its
	// re-registration is answered.
	var cert2 *x509.Certificate
	c.Eventually("the re-registration to issue a new certificate", func() bool {
		cert2 = readCert(t, filepath.Join(tlsDir, "node.pem"))
		return cert2.SerialNumber.Cmp(cert1.SerialNumber) != 0
	})
	if !pki.PublicKeysEqual(cert1.PublicKey, cert2.PublicKey) {
		t.Error("the worker's key changed across a restart")
	}
	if got := c.Job("tls-1"); testcluster.Instance(got, "primary").GetPhase() != norsk.InstancePhaseRunning {
		t.Errorf("after the worker restart the instance is %v", testcluster.Instance(got, "primary").GetPhase())
	}

	// And a Manager restart: the controller dials the worker over mutual
	// TLS again with a fresh client certificate.
	c.RestartManager()
	c.Eventually("worker-1 to be connected to the new Manager", func() bool { return c.Node("worker-1").GetConnected() })
	if err := c.Client().StopJob(x, "tls-1", "primary", "worker-1", norsk.StopJobOptions{Grace: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c.WaitPhase("tls-1", "primary", norsk.InstancePhaseStopped)
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := certpin.ParsePEMCertificates(b)
	if err != nil {
		t.Fatal(err)
	}
	return cs[0]
}

// openControl opens a NodeController stream the way the Manager does and
// waits for the worker's hello.
func openControl(ctx context.Context, hc *http.Client, base, secret string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	client := managerv1connect.NewNodeControllerClient(hc, base, connect.WithGRPC())
	stream := client.Control(ctx)
	stream.RequestHeader().Set("Authorization", "Bearer "+secret)
	defer func() { _ = stream.CloseRequest() }()
	if err := stream.Send(&managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Hello{Hello: &managerv1.ControllerHello{NodeId: "worker-1", ManagerNodeName: "impostor"}}}); err != nil {
		return err
	}
	m, err := stream.Receive()
	if err != nil {
		return err
	}
	if m.GetHello() == nil {
		return errors.New("no hello")
	}
	return nil
}
