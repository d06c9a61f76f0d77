package mgr_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/norsk-go/norsk-manager/internal/mgr"
	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/pkg/discovery"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

const adminPassword = "admin-password-1"

// start runs a norsk-mgr beside member m of c.
func start(t testing.TB, c *testcluster.Cluster, m *testcluster.Member, key *jose.JSONWebKey, interval time.Duration) *mgr.Server {
	t.Helper()
	var keys []*jose.JSONWebKey
	if key != nil {
		keys = []*jose.JSONWebKey{key}
	}
	s, err := mgr.New(testcluster.Context(t), mgr.Config{
		Manager: norsk.Settings{URL: m.URL(), Token: c.Token()},
		Listen:  "127.0.0.1:0", DiscoveryListen: "127.0.0.1:0",
		Interval: interval, SigningKeys: keys,
		AdminUser: "admin", AdminPassword: adminPassword,
		SignInBurst: 3, SignInRate: time.Minute,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// browser is an HTTP client with a cookie jar, as a browser signed in.
type browser struct {
	t    testing.TB
	base string
	hc   *http.Client
	csrf string
}

func newBrowser(t testing.TB, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, hc: &http.Client{Jar: jar, Timeout: 20 * time.Second}}
}

func (b *browser) do(method, path string, body any, hdr map[string]string) (int, map[string]any, *http.Response) {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		js, _ := json.Marshal(body)
		rd = strings.NewReader(string(js))
	}
	req, _ := http.NewRequest(method, b.base+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out, res
}

func (b *browser) login(user, pw string) int {
	code, out, _ := b.do("POST", "/api/login", map[string]string{"user": user, "password": pw}, nil)
	if code == 200 {
		b.csrf, _ = out["csrf"].(string)
	}
	return code
}

func (b *browser) post(path string, body any) (int, map[string]any) {
	code, out, _ := b.do("POST", path, body, map[string]string{mgr.CSRFHeader: b.csrf})
	return code, out
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testcluster.WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestConsoleSignInCookiesCSRFAndRoles(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	s := start(t, c, c.Members[0], nil, 200*time.Millisecond)
	ctx := testcluster.Context(t)

	anon := newBrowser(t, s.URL())
	if code, _, _ := anon.do("GET", "/api/overview", nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("overview without a session: %d, want 401", code)
	}
	if code := anon.login("admin", "wrong password"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong password: %d, want 401", code)
	}

	admin := newBrowser(t, s.URL())
	code, out, res := admin.do("POST", "/api/login", map[string]string{"user": "admin", "password": adminPassword}, nil)
	if code != 200 || out["role"] != "admin" {
		t.Fatalf("sign in: %d %v", code, out)
	}
	admin.csrf = out["csrf"].(string)
	var ck *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == mgr.CookieName {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" {
		t.Fatalf("session cookie %+v: want HttpOnly, Secure, SameSite=Strict, Path=/", ck)
	}

	// Every action needs the CSRF token and a same-origin request.
	if code, _, _ := admin.do("POST", "/api/users", map[string]string{"name": "vera", "role": "viewer", "password": "viewer-pass-1"}, nil); code != http.StatusForbidden {
		t.Fatalf("an action without the CSRF token: %d, want 403", code)
	}
	if code, _, _ := admin.do("POST", "/api/users", map[string]string{"name": "vera", "role": "viewer", "password": "viewer-pass-1"},
		map[string]string{mgr.CSRFHeader: admin.csrf, "Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Fatalf("a cross-site action: %d, want 403", code)
	}
	if code, out := admin.post("/api/users", map[string]string{"name": "vera", "role": "viewer", "password": "viewer-pass-1"}); code != 200 {
		t.Fatalf("add a viewer: %d %v", code, out)
	}
	if code, _ := admin.post("/api/users", map[string]string{"name": "olga", "role": "operator", "password": "short"}); code != http.StatusBadRequest {
		t.Fatalf("a short password: %d, want 400", code)
	}

	// A viewer reads but cannot act: the API refuses.
	viewer := newBrowser(t, s.URL())
	if code := viewer.login("vera", "viewer-pass-1"); code != 200 {
		t.Fatalf("viewer sign-in: %d", code)
	}
	if code, _, _ := viewer.do("GET", "/api/nodes", nil, nil); code != 200 {
		t.Fatalf("viewer reads nodes: %d", code)
	}
	nodes, _ := c.Client().ListNodes(ctx)
	if code, _ := viewer.post("/api/nodes/"+nodes[0].GetNodeId()+"/drain", map[string]bool{"draining": true}); code != http.StatusForbidden {
		t.Fatalf("viewer drains a node: %d, want 403", code)
	}
	if n, _ := c.Client().ListNodes(ctx); n[0].GetDraining() {
		t.Fatal("the viewer's refused drain drained the node")
	}
	if code, _ := viewer.post("/api/nodes/"+nodes[0].GetNodeId()+"/prefetch", map[string][]string{"images": {"127.0.0.1:5000/x:1"}}); code != http.StatusForbidden {
		t.Fatalf("viewer prefetches: %d, want 403", code)
	}
	// A prefetch reaches the Manager, which refuses it on a process node
	// (no images there), saying so.
	if code, out := admin.post("/api/nodes/"+nodes[0].GetNodeId()+"/prefetch", map[string][]string{"images": {"127.0.0.1:5000/x:1"}}); code != http.StatusConflict || !strings.Contains(fmt.Sprint(out), "holds no images") {
		t.Fatalf("admin prefetches on a process node: %d %v, want 409 naming the runtime", code, out)
	}
	if code, _ := admin.post("/api/nodes/"+nodes[0].GetNodeId()+"/prefetch", map[string][]string{}); code != http.StatusBadRequest {
		t.Fatalf("a prefetch of nothing: %d, want 400", code)
	}
	// An operator's drain goes through, and is audited.
	if code, out := admin.post("/api/nodes/"+nodes[0].GetNodeId()+"/drain", map[string]bool{"draining": true}); code != 200 {
		t.Fatalf("admin drains: %d %v", code, out)
	}
	if n, _ := c.Client().ListNodes(ctx); !n[0].GetDraining() {
		t.Fatal("the node is not draining")
	}

	// A password change ends the user's sessions.
	if code, _ := admin.post("/api/users/vera/password", map[string]string{"password": "viewer-pass-2"}); code != 200 {
		t.Fatal("passwd")
	}
	if code, _, _ := viewer.do("GET", "/api/nodes", nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("after a password change the old session reads: %d, want 401", code)
	}

	// Sign-in is rate limited per user name (burst 3).
	limited := newBrowser(t, s.URL())
	got429 := false
	for range 5 {
		if limited.login("vera", "nope-nope-nope") == http.StatusTooManyRequests {
			got429 = true
		}
	}
	if !got429 {
		t.Fatal("five failed sign-ins in a row were never throttled")
	}

	// Sign-ins and actions are in the audit log under norsk-mgr's source.
	page, err := c.Client().GetAuditLog(ctx, norsk.AuditLogQuery{Source: mgr.AuditSource, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range page.GetEntries() {
		kinds[e.GetKind()]++
	}
	for _, k := range []string{"sign-in", "sign-in-failed", "sign-in-throttled", "action", "action-refused"} {
		if kinds[k] == 0 {
			t.Errorf("no %q audit entry (have %v)", k, kinds)
		}
	}
}

func TestRoleStoreReplicaAndDiscoveryReplica(t *testing.T) {
	t.Parallel()
	key, jwks := mgr.TestSigningKey(t)
	c := testcluster.New(t, testcluster.Options{Workers: 1, AccessReplicaKeysFile: jwks})
	s := start(t, c, c.Members[0], key, 100*time.Millisecond)
	ctx := testcluster.Context(t)
	cl := c.Client()

	// The active norsk-mgr publishes the role store (version 1: the admin)
	// and, after a change, version 2 with its delta; the worker gets it.
	eventually(t, "norsk-mgr active", s.Active)
	w := c.Worker("worker-1").Agent()
	eventually(t, "the worker holds replica version 1", func() bool { v, _ := w.AccessReplica(); return v == 1 })
	if err := rolestore.New(cl).Add(ctx, "olga", rolestore.RoleOperator, "operator-pass"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker holds replica version 2", func() bool { v, _ := w.AccessReplica(); return v == 2 })
	_, roles := w.AccessReplica()
	if !strings.Contains(string(roles), `"olga":{"epoch":1,"role":"operator"}`) || strings.Contains(string(roles), "argon2") {
		t.Fatalf("replica roles %s: want olga as operator and no password hash", roles)
	}

	// The fleet names this replica; node tokens and the leaf token work.
	var fleet *norsk.DiscoveryFleet
	eventually(t, "the fleet published", func() bool {
		f, err := cl.GetDiscoveryFleet(ctx)
		fleet = f
		return err == nil && f != nil && len(f.GetAddresses()) == 1 && f.GetAddresses()[0] == s.DiscoveryAddress()
	})
	disco := func(token, path string) (int, map[string]any) {
		req, _ := http.NewRequest("GET", "http://"+s.DiscoveryAddress()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}
	eventually(t, "the replica serves", func() bool { code, _ := disco(fleet.GetLeafToken(), "/v1/whoami"); return code == 200 })
	if code, out := disco(discovery.MintNodeToken(fleet.GetTierSecret(), "worker-1"), "/v1/whoami"); code != 200 || out["kind"] != "node" || out["nodeId"] != "worker-1" {
		t.Fatalf("node token: %d %v", code, out)
	}
	for _, bad := range []string{"", "nope", discovery.MintNodeToken("another secret", "worker-1")} {
		if code, _ := disco(bad, "/v1/services"); code != http.StatusUnauthorized {
			t.Errorf("token %q: %d, want 401", bad, code)
		}
	}
	// The directory: a running job's instance with its resolved ports.
	job := &norsk.Job{JobId: "svc", Services: []*norsk.Service{{Name: "main", Command: []string{testcluster.TestProg(t), "-listen", "9000"},
		Ports: []*norsk.PortMapping{{ContainerPort: 9000, Protocol: norsk.ProtocolTCP}}}}}
	if _, err := cl.CreateJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(ctx, "svc", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "svc in the directory with its port", func() bool {
		code, out := disco(fleet.GetLeafToken(), "/v1/services?job=svc")
		if code != 200 {
			return false
		}
		svcs, _ := out["services"].([]any)
		if len(svcs) != 1 {
			return false
		}
		e := svcs[0].(map[string]any)
		ports, _ := e["ports"].(map[string]any)
		return e["phase"] == "running" && e["nodeId"] == "worker-1" && len(ports) == 1
	})

	// A rotation never refuses a valid token: each step is taken by the
	// replica within an interval, and the console says whom it waits for.
	admin := newBrowser(t, s.URL())
	if admin.login("admin", adminPassword) != 200 {
		t.Fatal("sign in")
	}
	old := discovery.MintNodeToken(fleet.GetTierSecret(), "worker-1")
	for _, step := range []string{norsk.RotationStage, norsk.RotationFlip, norsk.RotationFinish} {
		eventually(t, "no replica to wait for before "+step, func() bool {
			_, out, _ := admin.do("GET", "/api/discovery", nil, nil)
			w, _ := out["waitingFor"].([]any)
			return out["next"] == step && len(w) == 0
		})
		if code, out := admin.post("/api/discovery/rotate", map[string]string{"step": step}); code != 200 {
			t.Fatalf("%s: %d %v", step, code, out)
		}
		f, _ := cl.GetDiscoveryFleet(ctx)
		eventually(t, "the replica takes "+step, func() bool {
			_, out, _ := admin.do("GET", "/api/discovery", nil, nil)
			w, _ := out["waitingFor"].([]any)
			return len(w) == 0
		})
		cur := discovery.MintNodeToken(f.GetTierSecret(), "worker-1")
		if code, _ := disco(cur, "/v1/whoami"); code != 200 {
			t.Errorf("after %s the token minted now is refused: %d", step, code)
		}
		if step != norsk.RotationFinish {
			if code, _ := disco(old, "/v1/whoami"); code != 200 {
				t.Errorf("after %s the old token is refused: %d", step, code)
			}
		} else if code, _ := disco(old, "/v1/whoami"); code != http.StatusUnauthorized {
			t.Errorf("after finish the old secret's token is accepted: %d", code)
		}
	}
}

// The active norsk-mgr vanishes without a word (as kill -9 leaves it: the
// lease is not released); a standby takes the lease once the member reports
// it stale and publishes; no replica version is published twice.
func TestStandbyTakesOverWhenTheActiveGoesStale(t *testing.T) {
	t.Parallel()
	key, jwks := mgr.TestSigningKey(t)
	c := testcluster.New(t, testcluster.Options{Members: 3, AccessReplicaKeysFile: jwks})
	const interval = 200 * time.Millisecond
	var ss []*mgr.Server
	for _, m := range c.Members {
		ss = append(ss, start(t, c, m, key, interval))
	}
	active := func() []*mgr.Server {
		var out []*mgr.Server
		for _, s := range ss {
			if s.Active() {
				out = append(out, s)
			}
		}
		return out
	}
	eventually(t, "one active norsk-mgr", func() bool { return len(active()) == 1 })
	ctx := testcluster.Context(t)
	cl := c.Client()
	roles := rolestore.New(cl)
	if err := roles.Add(ctx, "olga", rolestore.RoleOperator, "operator-pass"); err != nil {
		t.Fatal(err)
	}
	published := func() map[uint64]int {
		page, err := cl.GetAuditLog(ctx, norsk.AuditLogQuery{Source: mgr.AuditSource, Kind: "replica-published", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		n := map[uint64]int{}
		for _, e := range page.GetEntries() {
			var p struct{ Version uint64 }
			_ = json.Unmarshal([]byte(e.GetPayload()), &p)
			n[p.Version]++
		}
		return n
	}
	eventually(t, "version 2 published", func() bool { return published()[2] == 1 })

	gone := active()[0]
	_ = gone.Close()
	killed := time.Now()
	var next *mgr.Server
	eventually(t, "a standby takes over", func() bool {
		if a := active(); len(a) == 1 && a[0] != gone {
			next = a[0]
			return true
		}
		return false
	})
	t.Logf("standby of %s active %v after the active one stopped (interval %v)", next.Member(), time.Since(killed).Round(10*time.Millisecond), interval)
	if err := roles.Add(ctx, "vera", rolestore.RoleViewer, "viewer-pass-1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "version 3 published by the new active one", func() bool { return published()[3] == 1 })
	for v, n := range published() {
		if n != 1 {
			t.Errorf("version %d published %d times", v, n)
		}
	}
	page, _ := cl.GetAuditLog(ctx, norsk.AuditLogQuery{Source: mgr.AuditSource, Kind: "lease-taken", Limit: 100})
	if len(page.GetEntries()) < 2 {
		t.Errorf("lease takeovers audited: %d, want the first and the takeover", len(page.GetEntries()))
	}
	_ = fmt.Sprint
	_ = context.Background
}
