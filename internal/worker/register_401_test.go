package worker_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
)

// TestHTTP401FromAProxyDoesNotWipeTheNode: a bare HTTP 401 at the Manager URL
// (an authenticating reverse proxy or ingress, another service on the port)
// is not the Manager refusing the node secret. The worker keeps retrying:
// Run does not end, the instance keeps running and the identity is kept.
func TestHTTP401FromAProxyDoesNotWipeTheNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("live", svc("main")), "primary", 3)
	pid := pidOf(t, e.dataDir, "live", "main")
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// An HTTP/2 front (h2c here; h2 over TLS alike) answering 401.
	proxy := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="ingress"`)
		http.Error(w, "401 Unauthorized", http.StatusUnauthorized)
	}))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	proxy.Config.Protocols = &p
	proxy.Start()
	defer proxy.Close()
	cfg := e.config()
	cfg.Token = ""
	cfg.ManagerURL = proxy.URL
	b := e.runNoWait(cfg)
	select {
	case err := <-b.done:
		b.done <- err
		t.Errorf("Run ended with %v after one HTTP 401 from %s", err, proxy.URL)
	case <-time.After(3 * time.Second):
	}
	if !alive(pid) {
		t.Errorf("the live instance (pid %d) was stopped because something answered HTTP 401", pid)
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "identity.json")); err != nil {
		t.Errorf("the node identity was deleted: %v", err)
	}
}

// TestPassingSecretRefusalDoesNotWipeTheNode: the Manager's own refusal of the
// node secret is believed only once it has lasted ReregisterAfter; one that
// passes sooner (a member that had not caught up) leaves the instances
// running and the identity in place, and the worker registers once the
// secret is accepted again.
func TestPassingSecretRefusalDoesNotWipeTheNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("live", svc("main")), "primary", 3)
	pid := pidOf(t, e.dataDir, "live", "main")
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	e.mgr.Deregister(e.nodeID)
	cfg := e.config()
	cfg.Token = ""
	cfg.ReregisterAfter = time.Hour
	cfg.RegisterRetry = 200 * time.Millisecond
	b := e.runNoWait(cfg)
	runtimetest.Eventually(t, wait, "several refused registrations", func() bool { return e.mgr.Refused() >= 3 })
	select {
	case err := <-b.done:
		b.done <- err
		t.Fatalf("Run ended with %v while the refusal had lasted less than ReregisterAfter", err)
	default:
	}
	if !alive(pid) {
		t.Fatalf("the live instance (pid %d) was stopped on a refusal that had not lasted", pid)
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "identity.json")); err != nil {
		t.Fatalf("the node identity was deleted: %v", err)
	}

	e.mgr.Reinstate(e.nodeID)
	select {
	case <-b.Ready():
	case err := <-b.done:
		b.done <- err
		t.Fatalf("Run: %v", err)
	case <-time.After(wait):
		t.Fatal("not registered once the secret was accepted again")
	}
	if !alive(pid) {
		t.Fatalf("the live instance (pid %d) was stopped", pid)
	}
}
