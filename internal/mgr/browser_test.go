package mgr_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/norsk-go/norsk-manager/examples/exampletest"
	"github.com/norsk-go/norsk-manager/internal/mgr"
	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// chromium finds Debian's chromium (or another Chrome); the browser tests
// skip with a message without one.
func chromium(t testing.TB) string {
	t.Helper()
	if p := findChromium(); p != "" {
		return p
	}
	t.Skip("no chromium found (apt-get install chromium): the browser tests are skipped")
	return ""
}

// The browser tests share one headless Chromium (it takes seconds to
// start); each test gets a tab of its own. TestMain starts it early, beside
// the tests' clusters, and stops it at the end.
var shared struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	err    error
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startBrowser starts the shared Chromium once.
func startBrowser(exe string) {
	shared.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
			chromedp.WindowSize(1280, 860), chromedp.Flag("disable-dev-shm-usage", true))
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		shared.ctx = bctx
		shared.cancel = func() { cancelBrowser(); cancelAlloc() }
		shared.err = chromedp.Do(bctx)
	})
}

func TestMain(m *testing.M) {
	if exe := findChromium(); exe != "" {
		go startBrowser(exe)
	}
	code := m.Run()
	if shared.cancel != nil {
		shared.cancel()
	}
	os.Exit(code)
}

// newBrowserTab returns a new tab of the shared Chromium.
func newBrowserTab(t testing.TB) context.Context {
	exe := chromium(t)
	startBrowser(exe)
	if shared.err != nil {
		t.Skipf("chromium does not start (%v): the browser tests are skipped", shared.err)
	}
	ctx, cancel := chromedp.NewContext(shared.ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return ctx
}

// screenshot saves the page as docs/img/<name>.png when
// NORSK_CONSOLE_SCREENSHOTS names the directory (make screenshots).
func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("NORSK_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	if err := chromedp.Do(ctx, chromedp.Sleep(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func run(t testing.TB, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, actions...); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("main")))
		t.Fatalf("%s: %v\npage: %s", what, err, html)
	}
}

func signIn(t testing.TB, ctx context.Context, url, user, pw string) {
	run(t, ctx, "sign in as "+user,
		chromedp.Navigate(url+"/#/"),
		chromedp.WaitVisible(chromedp.CSS("#login-user")),
		chromedp.SendKeys(chromedp.CSS("#login-user"), user),
		chromedp.SendKeys(chromedp.CSS("#login-pass"), pw),
		chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#who-user")),
		chromedp.WaitVisible(chromedp.CSS(`main[data-page="overview"] #job-count`)),
	)
}

// The console end to end in a real browser: sign in, a job starting live,
// a handover migration followed by its phase bar, a drain, the audit log,
// the session cookie's flags, CSRF, and a viewer who cannot act.
func TestConsoleInBrowser(t *testing.T) {
	ctx := newBrowserTab(t)
	key, jwks := mgr.TestSigningKey(t)
	// A calmer heartbeat than the default 100 ms: a loaded machine (or -race)
	// must not drop a worker's stream in the middle of the handover.
	c := testcluster.New(t, testcluster.Options{Workers: 2, JobSocket: true, AccessReplicaKeysFile: jwks, HeartbeatInterval: 500 * time.Millisecond})
	s := start(t, c, c.Members[0], key, 200*time.Millisecond)
	x := testcluster.Context(t)
	cl := c.Client()
	if err := rolestore.New(cl).Add(x, "vera", rolestore.RoleViewer, "viewer-pass-1"); err != nil {
		t.Fatal(err)
	}
	sample := exampletest.Build(t, exampletest.SampleMediaPackage)
	sink := testcluster.NewFrameSink(t)

	signIn(t, ctx, s.URL(), "admin", adminPassword)

	// The cookie: HttpOnly, Secure (accepted on http://127.0.0.1), Strict.
	res, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{})
	})
	if err != nil {
		t.Fatal(err)
	}
	cookies := res.Cookies
	found := false
	for _, ck := range cookies {
		if ck.Name == mgr.CookieName {
			found = true
			if !ck.HTTPOnly || !ck.Secure || ck.SameSite != network.CookieSameSiteStrict {
				t.Errorf("session cookie in the browser: httpOnly %v secure %v sameSite %v", ck.HTTPOnly, ck.Secure, ck.SameSite)
			}
		}
	}
	if !found {
		t.Fatal("the browser kept no session cookie")
	}
	// A POST without the CSRF token is refused, even from the page itself.
	status := eval[int](t, ctx, `fetch("/api/leases/pause", {method: "POST", body: "{}"}).then(r => r.status)`)
	if status != 403 {
		t.Errorf("a POST without the CSRF token: %d, want 403", status)
	}

	// A job starts and the jobs page shows it running, live.
	run(t, ctx, "jobs page", chromedp.Navigate(s.URL()+"/#/jobs"), chromedp.WaitVisible(chromedp.CSS("#jobs-table")))
	job := &norsk.Job{JobId: "news", Description: "news channel", Tags: map[string]string{"channel": "news"},
		Services: []*norsk.Service{{Name: "main", Command: []string{testcluster.TestProg(t)}}}}
	if _, err := cl.CreateJob(x, job); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartJob(x, "news", "primary", "worker-1", norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "see news running without a reload", chromedp.WaitVisible(chromedp.CSS(`tr[data-job="news"] .pill.running`)))
	screenshot(t, ctx, "jobs")

	// A handover from the console moves the sample job; the phase bar follows.
	if _, err := cl.CreateBundle(x, &norsk.Bundle{BundleId: "live", Jobs: []*norsk.BundleJobSpec{{
		JobName: "channel", Requirements: &norsk.JobRequirements{RequiredCapacity: 0.1},
		Job: &norsk.Job{Services: []*norsk.Service{{Name: "media", Command: []string{sample}, Env: map[string]string{"SINK": sink.URL(), "FRAME_RATE": "25"}}}},
	}}}); err != nil {
		t.Fatal(err)
	}
	var liveID, liveNode string
	c.Eventually("the bundle's job running", func() bool {
		b, err := cl.BundleById(x, "live")
		if err != nil || len(b.GetJobs()) == 0 {
			return false
		}
		liveID, liveNode = b.GetJobs()[0].GetJobId(), b.GetJobs()[0].GetNodeId()
		return b.GetJobs()[0].GetPhase() == norsk.InstancePhaseRunning
	})
	// Streaming (and so attached to its job socket) before it is moved.
	if err := sink.WaitFrom(x, liveNode, 25); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "migrate by handover",
		chromedp.Navigate(s.URL()+"/#/job/"+liveID),
		chromedp.WaitVisible(chromedp.CSS(`button[data-action="migrate"]`)),
		chromedp.SetValue(chromedp.CSS("#migrate-strategy"), "handover"),
		chromedp.Click(chromedp.CSS(`button[data-action="migrate"]`)),
		chromedp.WaitVisible(chromedp.CSS(`.phasebar[data-phase]`)),
	)
	screenshot(t, ctx, "job-migrating")
	run(t, ctx, "the phase bar reaches done", chromedp.WaitVisible(chromedp.CSS(`.phasebar[data-phase="done"]`)))
	screenshot(t, ctx, "job")
	run(t, ctx, "migrations page", chromedp.Navigate(s.URL()+"/#/migrations"), chromedp.WaitVisible(chromedp.CSS(`#migrations-table .phasebar[data-phase="done"]`)))
	screenshot(t, ctx, "migrations")
	run(t, ctx, "bundles page", chromedp.Navigate(s.URL()+"/#/bundles"), chromedp.WaitVisible(chromedp.CSS(`main[data-page="bundles"] table`)))
	screenshot(t, ctx, "bundles")

	// Drain a node.
	run(t, ctx, "drain worker-2",
		chromedp.Navigate(s.URL()+"/#/nodes"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-node="worker-2"] button[data-action="drain"]`)),
		chromedp.Click(chromedp.CSS(`tr[data-node="worker-2"] button[data-action="drain"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-node="worker-2"] .pill.draining`)),
		chromedp.WaitVisible(chromedp.CSS(`#drains li[data-node="worker-2"]`)),
	)
	screenshot(t, ctx, "nodes")
	if n, _ := cl.ListNodes(x); !slicesAny(n, func(n *norsk.Node) bool { return n.GetNodeId() == "worker-2" && n.GetDraining() }) {
		t.Error("worker-2 is not draining in the Manager")
	}

	run(t, ctx, "overview", chromedp.Navigate(s.URL()+"/#/"), chromedp.WaitVisible(chromedp.CSS(`main[data-page="overview"] #job-count`)))
	screenshot(t, ctx, "overview")

	// The audit log shows the sign-in and the actions, and verifies.
	run(t, ctx, "audit log",
		chromedp.Navigate(s.URL()+"/#/audit"),
		chromedp.WaitVisible(chromedp.CSS("#audit-table")),
		chromedp.Click(chromedp.CSS(`button[data-action="verify"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#verify .pill`)),
	)
	auditText, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
	for _, want := range []string{"sign-in", "migrate", "drain", "chain verified"} {
		if !strings.Contains(auditText, want) {
			t.Errorf("the audit page does not show %q", want)
		}
	}
	screenshot(t, ctx, "audit")
	for _, p := range []struct{ route, sel, name string }{
		{"cluster", "#members", "cluster"}, {"leases", `main[data-page="leases"] table`, "leases"},
		{"kv", "#kv-table", "kv"}, {"discovery", `main[data-page="discovery"] table`, "discovery"}, {"users", "#users-table", "users"},
	} {
		run(t, ctx, p.route+" page", chromedp.Navigate(s.URL()+"/#/"+p.route), chromedp.WaitVisible(chromedp.CSS(p.sel)))
		screenshot(t, ctx, p.name)
	}

	// A viewer: no action button, and the API refuses the action anyway.
	run(t, ctx, "sign out", chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#login-user")))
	signIn(t, ctx, s.URL(), "vera", "viewer-pass-1")
	run(t, ctx, "viewer's nodes page",
		chromedp.Navigate(s.URL()+"/#/nodes"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-node="worker-1"]`)),
	)
	buttons := eval[int](t, ctx, `document.querySelectorAll("button[data-action]").length`)
	if buttons != 0 {
		t.Errorf("a viewer sees %d action buttons on the nodes page", buttons)
	}
	run(t, ctx, "viewer's job page", chromedp.Navigate(s.URL()+"/#/job/news"), chromedp.WaitVisible(chromedp.CSS("#instances")))
	buttons = eval[int](t, ctx, `document.querySelectorAll("button[data-action]").length`)
	if buttons != 0 {
		t.Errorf("a viewer sees %d action buttons on a job page", buttons)
	}
	status = eval[int](t, ctx, `fetch("/api/session").then(r => r.json()).then(s =>
		fetch("/api/nodes/worker-1/drain", {method: "POST", headers: {"X-CSRF-Token": s.csrf, "Content-Type": "application/json"}, body: "{\"draining\": true}"})).then(r => r.status)`)
	if status != 403 {
		t.Errorf("the viewer's drain: %d, want 403", status)
	}
}

// A browser attached to a standby's console sees it become the active one,
// live, when the active norsk-mgr vanishes.
func TestConsoleStandbyTakeoverInBrowser(t *testing.T) {
	ctx := newBrowserTab(t)
	key, jwks := mgr.TestSigningKey(t)
	c := testcluster.New(t, testcluster.Options{Members: 3, AccessReplicaKeysFile: jwks})
	var ss []*mgr.Server
	for _, m := range c.Members {
		ss = append(ss, start(t, c, m, key, 200*time.Millisecond))
	}
	var active, standby *mgr.Server
	eventually(t, "one active norsk-mgr", func() bool {
		active, standby = nil, nil
		n := 0
		for _, s := range ss {
			if s.Active() {
				active = s
				n++
			} else {
				standby = s
			}
		}
		return n == 1
	})
	signIn(t, ctx, standby.URL(), "admin", adminPassword)
	run(t, ctx, "the standby's cluster page", chromedp.Navigate(standby.URL()+"/#/cluster"), chromedp.WaitVisible(chromedp.CSS(`#self .pill.standby`)))
	_ = active.Close()
	// Whichever standby takes the lease, the page shows the new holder live.
	run(t, ctx, "the page shows the takeover, live", chromedp.WaitVisible(chromedp.CSS(`#self:not([data-holder="`+active.Member()+`"]):not([data-holder=""])`)))
	text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#self")))
	var now *mgr.Server
	for _, s := range ss {
		if s != active && s.Active() {
			now = s
		}
	}
	if now == nil || !strings.Contains(text, "held by "+now.Member()) {
		t.Errorf("after the takeover the page says %q", text)
	}
	if now == standby {
		run(t, ctx, "this console's norsk-mgr is the active one now", chromedp.WaitVisible(chromedp.CSS(`#self .pill.active`)))
	}
}

func slicesAny[T any](s []T, f func(T) bool) bool {
	for _, v := range s {
		if f(v) {
			return true
		}
	}
	return false
}

// eval evaluates a JavaScript expression in the page (awaiting a promise).
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// A page whose load fails at the network (a fetch cut while a member is
// busy or a norsk-mgr takes over) says so and loads again on its own,
// without an event or a click.
func TestConsolePageLoadsAgainAfterAFailedFetch(t *testing.T) {
	ctx := newBrowserTab(t)
	key, jwks := mgr.TestSigningKey(t)
	c := testcluster.New(t, testcluster.Options{AccessReplicaKeysFile: jwks})
	s := start(t, c, c.Members[0], key, 200*time.Millisecond)

	// The browser fails the first request for the overview's data, as a
	// connection reset would; every other request goes through.
	paused := make(chan *fetch.EventRequestPaused, 1024)
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			paused <- e
		}
	}); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int32
	go func() {
		for {
			var e *fetch.EventRequestPaused
			select {
			case <-ctx.Done():
				return
			case e = <-paused:
			}
			if strings.HasSuffix(e.Request.URL, "/api/overview") && failed.Add(1) == 1 {
				_ = chromedp.Do(ctx, cdpCall(fetch.FailRequest, fetch.FailRequestParams{RequestID: e.RequestID, ErrorReason: network.ErrorReasonConnectionReset}))
				continue
			}
			_ = chromedp.Do(ctx, cdpCall(fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID}))
		}
	}()
	run(t, ctx, "intercept the page's requests", cdpCall(fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/api/*"}}}))
	t.Cleanup(func() {
		_ = chromedp.Do(ctx, cdpCall(fetch.Disable, cdp.Empty{}))
	})

	// signIn waits for the overview: it shows only if the page loaded again
	// after the failure.
	signIn(t, ctx, s.URL(), "admin", adminPassword)
	if n := failed.Load(); n < 2 {
		t.Fatalf("the overview's data was asked for %d times: want the failed load and the retry", n)
	}
}

// cdpCall is a chromedp action that runs one DevTools command, ignoring its
// result.
func cdpCall[P, R any](cmd cdp.Command[P, R], p P) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, cmd, p)
		return chromedp.Void{}, err
	}
}
