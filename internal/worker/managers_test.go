package worker_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/internal/worker/workertest"
)

// deadURL is an http URL where nothing listens.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// A worker given several Manager members registers with one that answers,
// remembers every member a primary's hello names, and after a restart
// registers with them although the one it was configured with is gone.
func TestWorkerRegistersWithAnyKnownMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config()
	cfg.ManagerURL = deadURL(t) + "," + e.mgr.URL
	a := e.run(cfg)

	c := workertest.Dial(context.Background(), a.Addr(), e.secret())
	t.Cleanup(c.Close)
	if _, err := c.Send(&managerv1.ControllerMessage{Msg: &managerv1.ControllerMessage_Hello{Hello: &managerv1.ControllerHello{
		NodeId: e.nodeID, ManagerNodeName: "fake-manager", HeartbeatIntervalMs: noHeartbeats,
		ManagerUrls: []string{e.mgr.URL, "http://mgr-2.example:6790"},
	}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Await(wait, func(m *managerv1.WorkerMessage) bool { return m.GetHello() != nil }); err != nil {
		t.Fatal(err)
	}
	id, err := worker.LoadIdentity(e.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{e.mgr.URL, "http://mgr-2.example:6790"}; !slices.Equal(id.ManagerURLs, want) {
		t.Errorf("remembered members = %v, want %v", id.ManagerURLs, want)
	}
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// Restarted with only a member that is gone: it registers with one it
	// remembered.
	before := len(e.mgr.Registrations())
	cfg = e.config()
	cfg.Token = ""
	cfg.ManagerURL = deadURL(t)
	e.run(cfg)
	runtimetest.Eventually(t, wait, "a registration with a remembered member", func() bool {
		return len(e.mgr.Registrations()) > before
	})
}

// Every configured member URL must be an http(s) URL of one scheme.
func TestWorkerManagerURLList(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ urls, want string }{
		{"http://a:1,ftp://b:2", "ftp://b:2"},
		{"https://a:1,http://b:2", "same scheme"},
		{"http://a:1,https://b:2", "same scheme"},
		{"http://a:1,", `""`},
	} {
		e := newEnv(t)
		cfg := e.config()
		cfg.ManagerURL = tc.urls
		_, err := worker.New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ManagerURL %q: %v, want an error naming %s", tc.urls, err, tc.want)
		}
	}
}
