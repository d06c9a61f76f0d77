package tests

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// A cluster formed as docs/operations.md "Forming a cluster" says — three
// `norsk-manager run --config` processes with the same clusterNodes and
// secret and no preset token — shows its bootstrap admin token on the
// console of exactly one member (the first primary), once, and that token
// works on every member (issue 12, item 10: it was made after New had
// returned, and never printed).
func TestClusterFormationPrintsBootstrapToken(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts three norsk-manager processes")
	}
	bin := buildManager(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "cluster-secret")
	if err := os.WriteFile(secret, []byte("a-cluster-secret-of-some-length\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type member struct {
		name, api, raft string
		cmd             *exec.Cmd
		mu              sync.Mutex
		tokens          []string
		log             []string // its console, for a failure's message
		done            chan struct{}
	}
	names := []string{"mgr-1", "mgr-2", "mgr-3"}
	ms := make([]*member, len(names))
	var nodes strings.Builder
	for i, n := range names {
		ms[i] = &member{
			name: n,
			api:  fmt.Sprintf("127.0.0.1:%d", testcluster.FreePort(t, "127.0.0.1")),
			raft: fmt.Sprintf("127.0.0.1:%d", testcluster.FreePort(t, "127.0.0.1")),
			done: make(chan struct{}),
		}
		fmt.Fprintf(&nodes, "  - {name: %s, raft: %s, api: http://%s}\n", n, ms[i].raft, ms[i].api)
	}
	for _, m := range ms {
		cfg := fmt.Sprintf("nodeName: %s\ndataDir: %s\nlisten: %s\nraftListen: %s\nclusterSecretFile: %s\nclusterNodes:\n%s",
			m.name, filepath.Join(dir, m.name), m.api, m.raft, secret, nodes.String())
		path := filepath.Join(dir, m.name+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		m.cmd = exec.Command(bin, "run", "--config", path, "--log-level", "warn")
		m.cmd.Env = append(os.Environ(), "NORSK_BOOTSTRAP_TOKEN=")
		stderr, err := m.cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				m.mu.Lock()
				m.log = append(m.log, sc.Text())
				if s := tokenRE.FindStringSubmatch(sc.Text()); s != nil {
					m.tokens = append(m.tokens, s[1])
				}
				m.mu.Unlock()
			}
		}()
		go func() { _ = m.cmd.Wait(); close(m.done) }()
		t.Cleanup(func() {
			_ = m.cmd.Process.Kill()
			<-m.done
		})
	}
	printed := func() (token string, by []string) {
		for _, m := range ms {
			m.mu.Lock()
			for _, tok := range m.tokens {
				token = tok
				by = append(by, m.name)
			}
			m.mu.Unlock()
		}
		return token, by
	}
	deadline := time.Now().Add(testcluster.WaitTimeout)
	var token string
	for {
		tok, by := printed()
		if len(by) > 0 {
			token = tok
			break
		}
		for _, m := range ms {
			select {
			case <-m.done:
				m.mu.Lock()
				log := strings.Join(m.log, "\n")
				m.mu.Unlock()
				t.Fatalf("member %s exited while the cluster formed (%v):\n%s", m.name, m.cmd.ProcessState, log)
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no member printed a bootstrap admin token")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The printed token answers on every member, the followers included.
	for _, m := range ms {
		var err error
		for {
			var cl *norsk.Manager
			cl, err = norsk.Connect(ctx(t), norsk.Settings{URL: "http://" + m.api, Token: token})
			if err == nil {
				_, err = cl.GetClusterStatus(ctx(t))
				_ = cl.Close()
			}
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("the printed token on %s: %v", m.name, err)
		}
	}
	if _, by := printed(); len(by) != 1 {
		t.Fatalf("the bootstrap token was printed %d times (by %v), want once", len(by), by)
	}
}
