package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/pkg/discovery"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// lockedBuffer records log output from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// recordingLogger records every log line of every component, debug
// included.
func recordingLogger() (*slog.Logger, *lockedBuffer) {
	b := &lockedBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

func wantCode(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

func TestDiscoveryRefusals(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{})
	m, cx := c.Client(), ctx(t)

	if f, err := m.GetDiscoveryFleet(cx); err != nil || f != nil {
		t.Fatalf("no fleet yet: %v, %v", f, err)
	}
	for _, step := range []string{norsk.RotationStage, norsk.RotationFlip, norsk.RotationFinish} {
		_, err := m.RotateDiscoveryTierSecret(cx, step, "")
		wantCode(t, step+" before any fleet", err, norsk.ErrFailedPrecondition)
	}

	good := func() *norsk.DiscoveryFleet {
		return &norsk.DiscoveryFleet{Addresses: []string{"replica-1:7400", "10.0.0.2:7400", "[::1]:7400"}, LeafToken: "leaf-1", TierSecret: "tier-1-secret-0123456789abcdef0123456789"}
	}
	for name, mut := range map[string]func(*norsk.DiscoveryFleet) *norsk.DiscoveryFleet{
		"no fleet":                 func(*norsk.DiscoveryFleet) *norsk.DiscoveryFleet { return nil },
		"empty tier secret":        func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet { f.TierSecret = ""; return f },
		"tier secret = leaf token": func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet { f.TierSecret = f.LeafToken; return f },
		"one-byte tier secret":     func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet { f.TierSecret = "x"; return f },
		"NUL in the tier secret": func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet {
			f.TierSecret = "tier-1-secret-0123456789abcdef\x00123456789"
			return f
		},
		"no address":           func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet { f.Addresses = nil; return f },
		"address without port": func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet { f.Addresses[1] = "replica-2"; return f },
		"port 0":               func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet { f.Addresses[1] = "replica-2:0"; return f },
		"port too big":         func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet { f.Addresses[1] = "replica-2:70000"; return f },
		"no host":              func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet { f.Addresses[1] = ":7400"; return f },
		"bad v6":               func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet { f.Addresses[1] = "[::1:7400"; return f },
		"a URL": func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet {
			f.Addresses[1] = "http://replica-2:7400"
			return f
		},
		"bad single address": func(f *norsk.DiscoveryFleet) *norsk.DiscoveryFleet {
			f.Addresses = nil
			f.Address = "replica"
			return f
		},
	} {
		_, _, err := m.PublishDiscoveryFleet(cx, mut(good()))
		wantCode(t, "publish with "+name, err, norsk.ErrInvalidArgument)
		if err != nil && strings.Contains(err.Error(), "tier-1-secret-0123456789abcdef0123456789") {
			t.Errorf("publish with %s: the error quotes the tier secret: %v", name, err)
		}
	}
	if f, err := m.GetDiscoveryFleet(cx); err != nil || f != nil {
		t.Fatalf("refused publishes changed nothing: %v, %v", f, err)
	}

	// The first publish is in force.
	f, kept, err := m.PublishDiscoveryFleet(cx, good())
	if err != nil || kept || f.GetTierSecret() != "tier-1-secret-0123456789abcdef0123456789" || f.GetLeafToken() != "leaf-1" || len(f.GetAddresses()) != 3 {
		t.Fatalf("first publish: %v kept=%v %v", f, kept, err)
	}
	// Different secrets: kept, and the reply carries the ones in force; the
	// addresses are the new publish's.
	f, kept, err = m.PublishDiscoveryFleet(cx, &norsk.DiscoveryFleet{Addresses: []string{"replica-9:7400"}, LeafToken: "leaf-2", TierSecret: "tier-2-secret-0123456789abcdef0123456789"})
	if err != nil || !kept || f.GetTierSecret() != "tier-1-secret-0123456789abcdef0123456789" || f.GetLeafToken() != "leaf-1" || len(f.GetAddresses()) != 1 || f.GetAddresses()[0] != "replica-9:7400" {
		t.Fatalf("second publish: %v kept=%v %v", f, kept, err)
	}
	got, err := m.GetDiscoveryFleet(cx)
	if err != nil || got.GetTierSecret() != "tier-1-secret-0123456789abcdef0123456789" || got.GetAddresses()[0] != "replica-9:7400" || got.GetRotationPhase() != "" || got.GetTierSecretAlt() != "" {
		t.Fatalf("get after the second publish: %v, %v", got, err)
	}
	// Only a different leaf token also counts as kept.
	if _, kept, err = m.PublishDiscoveryFleet(cx, &norsk.DiscoveryFleet{Addresses: []string{"replica-9:7400"}, LeafToken: "leaf-x", TierSecret: "tier-1-secret-0123456789abcdef0123456789"}); err != nil || !kept {
		t.Fatalf("publish with another leaf token: kept=%v %v", kept, err)
	}
	// The same secrets: nothing kept.
	if _, kept, err = m.PublishDiscoveryFleet(cx, good()); err != nil || kept {
		t.Fatalf("publish of the same secrets: kept=%v %v", kept, err)
	}

	// Rotation steps out of order, and bad steps.
	for _, tc := range []struct {
		step, secret string
		want         error
	}{
		{norsk.RotationFlip, "", norsk.ErrFailedPrecondition},
		{norsk.RotationFinish, "", norsk.ErrFailedPrecondition},
		{"rollback", "", norsk.ErrInvalidArgument},
		{"", "", norsk.ErrInvalidArgument},
		{norsk.RotationStage, "tier-1-secret-0123456789abcdef0123456789", norsk.ErrInvalidArgument}, // the secret in force
		{norsk.RotationStage, "leaf-1", norsk.ErrInvalidArgument},                                   // the leaf token
	} {
		_, err := m.RotateDiscoveryTierSecret(cx, tc.step, tc.secret)
		wantCode(t, fmt.Sprintf("rotate %q with no rotation under way", tc.step), err, tc.want)
	}
	staged, err := m.RotateDiscoveryTierSecret(cx, norsk.RotationStage, "")
	if err != nil || staged.GetRotationPhase() != "stage" || staged.GetTierSecret() != "tier-1-secret-0123456789abcdef0123456789" || len(staged.GetTierSecretAlt()) < 32 {
		t.Fatalf("stage with a generated secret: %v, %v", staged, err)
	}
	newSecret := staged.GetTierSecretAlt()
	for _, tc := range []struct {
		step, secret string
		want         error
	}{
		{norsk.RotationStage, "", norsk.ErrFailedPrecondition},
		{norsk.RotationFinish, "", norsk.ErrFailedPrecondition},
		{norsk.RotationFlip, "another", norsk.ErrInvalidArgument},
	} {
		_, err := m.RotateDiscoveryTierSecret(cx, tc.step, tc.secret)
		wantCode(t, fmt.Sprintf("rotate %q at stage", tc.step), err, tc.want)
	}
	flipped, err := m.RotateDiscoveryTierSecret(cx, norsk.RotationFlip, "")
	if err != nil || flipped.GetRotationPhase() != "flip" || flipped.GetTierSecret() != newSecret || flipped.GetTierSecretAlt() != "tier-1-secret-0123456789abcdef0123456789" {
		t.Fatalf("flip: %v, %v", flipped, err)
	}
	for _, step := range []string{norsk.RotationStage, norsk.RotationFlip} {
		_, err := m.RotateDiscoveryTierSecret(cx, step, "")
		wantCode(t, "rotate "+step+" at flip", err, norsk.ErrFailedPrecondition)
	}
	done, err := m.RotateDiscoveryTierSecret(cx, norsk.RotationFinish, "")
	if err != nil || done.GetRotationPhase() != "" || done.GetTierSecret() != newSecret || done.GetTierSecretAlt() != "" {
		t.Fatalf("finish: %v, %v", done, err)
	}
	_, err = m.RotateDiscoveryTierSecret(cx, norsk.RotationFinish, "")
	wantCode(t, "finish twice", err, norsk.ErrFailedPrecondition)
	// The rotated secret is the one in force: publishing the first again
	// keeps it.
	f, kept, err = m.PublishDiscoveryFleet(cx, good())
	if err != nil || !kept || f.GetTierSecret() != newSecret {
		t.Fatalf("publish after the rotation: %v kept=%v %v", f, kept, err)
	}
	// A stage with a secret of the caller's.
	if f, err := m.RotateDiscoveryTierSecret(cx, norsk.RotationStage, "tier-3-secret-0123456789abcdef0123456789"); err != nil || f.GetTierSecretAlt() != "tier-3-secret-0123456789abcdef0123456789" {
		t.Fatalf("stage with a given secret: %v, %v", f, err)
	}
	// The fleet survives a Manager restart, rotation under way included.
	c.RestartManager()
	if f, err := c.Client().GetDiscoveryFleet(ctx(t)); err != nil || f.GetTierSecret() != newSecret || f.GetTierSecretAlt() != "tier-3-secret-0123456789abcdef0123456789" || f.GetRotationPhase() != "stage" {
		t.Fatalf("after a restart: %v, %v", f, err)
	}
}

// accessOf is a worker's discovery access (nil when stopped or none).
func accessOf(w *testcluster.Worker) *norsk.DiscoveryAccess {
	if a := w.Agent(); a != nil {
		return a.DiscoveryAccess()
	}
	return nil
}

// hasToken reports whether the worker holds the node token minted from
// secret, with the fleet's addresses.
func hasToken(w *testcluster.Worker, secret string, addrs ...string) bool {
	a := w.Agent()
	if a == nil {
		return false
	}
	acc := a.DiscoveryAccess()
	if acc.GetNodeToken() != discovery.MintNodeToken(secret, a.NodeID()) {
		return false
	}
	if len(addrs) > 0 && strings.Join(acc.GetAddresses(), ",") != strings.Join(addrs, ",") {
		return false
	}
	return true
}

func TestDiscoveryAccessReachesNodes(t *testing.T) {
	t.Parallel()
	logger, logs := recordingLogger()
	c := testcluster.New(t, testcluster.Options{Workers: 2, Logger: logger})
	m, cx := c.Client(), ctx(t)

	// Everything the event stream carries, for the secrecy check.
	var evMu sync.Mutex
	var events []string
	evCtx, stopEvents := context.WithCancel(context.Background())
	evDone := make(chan struct{})
	go func() {
		defer close(evDone)
		s := m.EventStream(evCtx, norsk.EventStreamSettings{})
		defer s.Close()
		for s.Next() {
			b, _ := protojson.Marshal(s.Event())
			evMu.Lock()
			events = append(events, string(b))
			evMu.Unlock()
		}
	}()

	for _, w := range c.Workers {
		if acc := accessOf(w); acc != nil {
			t.Fatalf("%s has an access before any fleet: %v", w.Name, acc)
		}
	}
	const tier1, leaf = "tier-secret-one-0123456789abcdef0123456789", "leaf-token-abcdef"
	addrs := []string{"replica-1:7400", "replica-2:7400"}
	if _, _, err := m.PublishDiscoveryFleet(cx, &norsk.DiscoveryFleet{Addresses: addrs, LeafToken: leaf, TierSecret: tier1}); err != nil {
		t.Fatal(err)
	}
	// Every connected node is sent its access.
	for _, w := range c.Workers {
		c.Eventually(w.Name+"'s discovery access", func() bool { return hasToken(w, tier1, addrs...) })
		acc := accessOf(w)
		if acc.GetLeafToken() != leaf {
			t.Fatalf("%s: leaf token %q", w.Name, acc.GetLeafToken())
		}
		id, err := discovery.VerifyNodeToken(acc.GetNodeToken(), tier1)
		if err != nil || id != w.Agent().NodeID() {
			t.Fatalf("%s's node token: %q, %v", w.Name, id, err)
		}
	}
	tokens := map[string]bool{}
	for _, w := range c.Workers {
		tokens[accessOf(w).GetNodeToken()] = true
	}
	if len(tokens) != 2 {
		t.Fatal("the two nodes have the same token")
	}

	// New addresses reach the nodes; the tokens stay.
	addrs = append(addrs, "replica-3:7400")
	if _, kept, err := m.PublishDiscoveryFleet(cx, &norsk.DiscoveryFleet{Addresses: addrs, LeafToken: leaf, TierSecret: tier1}); err != nil || kept {
		t.Fatalf("republish: kept=%v %v", kept, err)
	}
	for _, w := range c.Workers {
		c.Eventually(w.Name+"'s new addresses", func() bool { return hasToken(w, tier1, addrs...) })
	}

	// Kept on disk, owner-only, without the tier secret; loaded at start.
	w1, w2 := c.Workers[0], c.Workers[1]
	path := filepath.Join(w1.Dir, "discovery.json")
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("discovery.json: %v, %v", st, err)
	}
	if b, _ := os.ReadFile(path); strings.Contains(string(b), tier1) || !strings.Contains(string(b), accessOf(w1).GetNodeToken()) {
		t.Fatalf("discovery.json: %s", b)
	}
	// (Loaded before the hello: internal/worker's TestDiscoveryAccessKept.)
	w1.Restart()
	if accessOf(w1) == nil {
		t.Fatalf("%s restarted without its kept access", w1.Name)
	}
	c.Eventually(w1.Name+"'s access after its restart", func() bool { return hasToken(w1, tier1, addrs...) })

	// Rotation: stage changes no token; flip sends every running node its
	// new one, and a node that was down gets it at its hello.
	staged, err := c.Client().RotateDiscoveryTierSecret(cx, norsk.RotationStage, "")
	if err != nil {
		t.Fatal(err)
	}
	tier2 := staged.GetTierSecretAlt()
	time.Sleep(300 * time.Millisecond)
	for _, w := range c.Workers {
		if !hasToken(w, tier1) {
			t.Fatalf("%s's token changed at stage", w.Name)
		}
	}
	if err := w2.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().RotateDiscoveryTierSecret(cx, norsk.RotationFlip, ""); err != nil {
		t.Fatal(err)
	}
	c.Eventually(w1.Name+"'s token after the flip", func() bool { return hasToken(w1, tier2, addrs...) })
	w2.Start()
	if accessOf(w2) == nil {
		t.Fatalf("%s did not load its kept token", w2.Name)
	}
	c.Eventually(w2.Name+"'s token at its hello", func() bool { return hasToken(w2, tier2, addrs...) })
	fin, err := c.Client().RotateDiscoveryTierSecret(cx, norsk.RotationFinish, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range c.Workers {
		if _, err := discovery.VerifyNodeToken(accessOf(w).GetNodeToken(), discovery.SecretsInForce(fin)...); err != nil {
			t.Fatalf("%s's token after finish: %v", w.Name, err)
		}
		if _, err := discovery.VerifyNodeToken(discovery.MintNodeToken(tier1, w.Agent().NodeID()), discovery.SecretsInForce(fin)...); !errors.Is(err, discovery.ErrRefused) {
			t.Fatalf("an old-secret token after finish: %v", err)
		}
		tokens[accessOf(w).GetNodeToken()] = true
	}

	// No secret or token in any log line, event or audit entry.
	stopEvents()
	<-evDone
	page, err := c.Client().GetAuditLog(cx, norsk.AuditLogQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	audit, _ := protojson.Marshal(page)
	evMu.Lock()
	allEvents := strings.Join(events, "\n")
	evMu.Unlock()
	if len(events) == 0 {
		t.Fatal("no events seen")
	}
	if !strings.Contains(string(audit), "PublishDiscoveryFleet") || !strings.Contains(string(audit), "RotateDiscoveryTierSecret") {
		t.Errorf("the audit log does not record the discovery calls:\n%s", audit)
	}
	secrets := map[string]string{"tier secret": tier1, "new tier secret": tier2, "leaf token": leaf}
	i := 0
	for tok := range tokens {
		i++
		id, _, _ := discovery.ParseNodeToken(tok)
		secrets[fmt.Sprintf("node token #%d (of %s)", i, id)] = tok
		// The MAC alone, too.
		secrets[fmt.Sprintf("node token #%d's MAC (of %s)", i, id)] = tok[strings.LastIndexByte(tok, '.')+1:]
	}
	if len(secrets) != 3+2*4 {
		t.Fatalf("%d secrets to look for, want 11 (four node tokens)", len(secrets))
	}
	logText := logs.String()
	if !strings.Contains(logText, "discovery access sent") || !strings.Contains(logText, "discovery access received") {
		t.Errorf("the logs do not show the access being sent and received")
	}
	for what, s := range secrets {
		for where, text := range map[string]string{"a log line": logText, "an event": allEvents, "the audit log": string(audit)} {
			if strings.Contains(text, s) {
				t.Errorf("the %s is in %s", what, where)
			}
		}
	}
}

// replica is a discovery replica as norsk-mgr runs one: it follows the
// Manager's fleet (GetDiscoveryFleet) and verifies node tokens against the
// secrets in force of the fleet it holds.
type replica struct {
	view atomic.Pointer[norsk.DiscoveryFleet]
}

func (r *replica) follow(ctx context.Context, m *norsk.Manager, errs chan<- error) {
	for ctx.Err() == nil {
		f, err := m.GetDiscoveryFleet(ctx)
		if err != nil {
			if ctx.Err() == nil {
				errs <- fmt.Errorf("replica: get fleet: %w", err)
			}
			return
		}
		r.view.Store(f)
		time.Sleep(2 * time.Millisecond)
	}
}

func (r *replica) verify(token string) (phase string, err error) {
	f := r.view.Load()
	_, err = discovery.VerifyNodeToken(token, discovery.SecretsInForce(f)...)
	return f.GetRotationPhase(), err
}

// TestDiscoveryRotationUnderLoad: replicas verify node tokens continuously,
// taken from the nodes' current access the way a node presents its own,
// through stage, flip and finish; no token valid at that moment is refused,
// and after finish a token minted from the old secret is.
func TestDiscoveryRotationUnderLoad(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 2})
	m, cx := c.Client(), ctx(t)
	const tier1 = "rotation-tier-secret-1-0123456789abcdef"
	addrs := []string{"replica-1:7400", "replica-2:7400", "replica-3:7400"}
	if _, _, err := m.PublishDiscoveryFleet(cx, &norsk.DiscoveryFleet{Addresses: addrs, LeafToken: "leaf", TierSecret: tier1}); err != nil {
		t.Fatal(err)
	}
	for _, w := range c.Workers {
		c.Eventually(w.Name+"'s access", func() bool { return hasToken(w, tier1) })
	}

	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	errs := make(chan error, 100)
	var wg sync.WaitGroup
	replicas := make([]*replica, len(addrs))
	for i := range replicas {
		r := &replica{}
		f, err := m.GetDiscoveryFleet(cx)
		if err != nil {
			t.Fatal(err)
		}
		r.view.Store(f)
		replicas[i] = r
		wg.Add(1)
		go func() { defer wg.Done(); r.follow(runCtx, m, errs) }()
	}
	// Nodes presenting their current token to every replica, continuously.
	type counts struct {
		mu       sync.Mutex
		byPhase  map[string]int
		refusals []string
	}
	var tally = counts{byPhase: map[string]int{}}
	iterations := make([]atomic.Int64, 2*len(c.Workers))
	for i := range iterations {
		w := c.Workers[i%len(c.Workers)]
		agent := w.Agent()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				tok := agent.DiscoveryAccess().GetNodeToken()
				for j, r := range replicas {
					phase, err := r.verify(tok)
					tally.mu.Lock()
					tally.byPhase[phase]++
					if err != nil && len(tally.refusals) < 20 {
						tally.refusals = append(tally.refusals, fmt.Sprintf("replica %d at phase %q refused %s's token: %v", j, phase, w.Name, err))
					}
					tally.mu.Unlock()
				}
				iterations[i].Add(1)
			}
		}()
	}
	// Every replica has taken the step (holds phase and secret).
	allTook := func(what string, ok func(*norsk.DiscoveryFleet) bool) {
		t.Helper()
		c.Eventually("every replica to take "+what, func() bool {
			for _, r := range replicas {
				if !ok(r.view.Load()) {
					return false
				}
			}
			return true
		})
	}
	// Every node goroutine has presented a token since now.
	allPresented := func() {
		t.Helper()
		marks := make([]int64, len(iterations))
		for i := range iterations {
			marks[i] = iterations[i].Load()
		}
		c.Eventually("every node to present its token", func() bool {
			for i := range iterations {
				if iterations[i].Load() < marks[i]+2 {
					return false
				}
			}
			return true
		})
	}
	hold := func() { time.Sleep(300 * time.Millisecond) }

	hold()
	staged, err := m.RotateDiscoveryTierSecret(cx, norsk.RotationStage, "")
	if err != nil {
		t.Fatal(err)
	}
	tier2 := staged.GetTierSecretAlt()
	allTook("stage", func(f *norsk.DiscoveryFleet) bool { return f.GetRotationPhase() == "stage" })
	hold()
	if _, err := m.RotateDiscoveryTierSecret(cx, norsk.RotationFlip, ""); err != nil {
		t.Fatal(err)
	}
	allTook("flip", func(f *norsk.DiscoveryFleet) bool { return f.GetRotationPhase() == "flip" })
	for _, w := range c.Workers {
		c.Eventually(w.Name+"'s new token", func() bool { return hasToken(w, tier2) })
	}
	allPresented()
	hold()
	if _, err := m.RotateDiscoveryTierSecret(cx, norsk.RotationFinish, ""); err != nil {
		t.Fatal(err)
	}
	allTook("finish", func(f *norsk.DiscoveryFleet) bool {
		return f.GetRotationPhase() == "" && f.GetTierSecret() == tier2 && f.GetTierSecretAlt() == ""
	})
	allPresented()
	hold()
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	tally.mu.Lock()
	defer tally.mu.Unlock()
	for _, r := range tally.refusals {
		t.Error(r)
	}
	// Before, stage, flip and after: "" counts before and after.
	for _, phase := range []string{"", "stage", "flip"} {
		if tally.byPhase[phase] < 10 {
			t.Errorf("only %d verifications at phase %q: %v", tally.byPhase[phase], phase, tally.byPhase)
		}
	}
	t.Logf("verifications by replica phase: %v", tally.byPhase)

	// After finish the old secret's tokens are refused, the new ones taken.
	f, err := m.GetDiscoveryFleet(cx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range c.Workers {
		id := w.Agent().NodeID()
		if _, err := discovery.VerifyNodeToken(discovery.MintNodeToken(tier1, id), discovery.SecretsInForce(f)...); !errors.Is(err, discovery.ErrRefused) {
			t.Errorf("%s: an old-secret token after finish: %v, want refused", w.Name, err)
		}
		for i, r := range replicas {
			if _, err := r.verify(discovery.MintNodeToken(tier1, id)); !errors.Is(err, discovery.ErrRefused) {
				t.Errorf("replica %d took an old-secret token after finish: %v", i, err)
			}
			if _, err := r.verify(accessOf(w).GetNodeToken()); err != nil {
				t.Errorf("replica %d refused %s's current token: %v", i, w.Name, err)
			}
		}
	}
}
