package tests

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"

	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/cli"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/internal/testimage"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// memberImage is norsk-manager as an image, FROM scratch (built once per
// test process; nothing is pulled).
const (
	memberImage   = "norsk-manager-member:test"
	memberPackage = "github.com/norsk-go/norsk-manager/cmd/norsk-manager"
	// dockerClusterLabel marks everything a test makes, with the test's
	// prefix as its value.
	dockerClusterLabel = "norsk.manager/docker-cluster-test"
)

// dockerMembers is a cluster of Manager members, each a norsk-manager
// process in its own container on a private bridge network. The test talks
// to each through its API port, published on an ephemeral port of
// 127.0.0.1, over TLS (the cluster CA the test made).
type dockerMembers struct {
	t       *testing.T
	cli     *client.Client
	prefix  string
	netID   string
	caFile  string
	token   string
	members []*dockerMember
}

// dockerMember is one member's container.
type dockerMember struct {
	d    *dockerMembers
	name string // node name and network alias: m1, m2, m3
	id   string // container ID

	mu     sync.Mutex
	port   string // published host port of the API (changes at a restart)
	client *norsk.Manager
}

// newDockerMembers starts n members forming a new cluster. It skips the
// test under -short and when no Docker engine answers. Containers, network
// and volumes are removed when the test ends, whatever its outcome; the
// members' last log lines are shown when it failed.
func newDockerMembers(t *testing.T, n int) *dockerMembers {
	t.Helper()
	if testing.Short() {
		t.Skip("Docker cluster tests start containers; skipped under -short")
	}
	cli := testimage.EnsureImage(t, memberImage, memberPackage)
	var b [3]byte
	_, _ = rand.Read(b[:])
	d := &dockerMembers{t: t, cli: cli, prefix: "nmdc" + hex.EncodeToString(b[:]), token: auth.NewToken()}

	dir := t.TempDir()
	ca, _, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatalf("make the cluster CA: %v", err)
	}
	d.caFile = filepath.Join(dir, pki.CACertFile)
	caPEM := pki.CertPEM(ca.Cert.Raw)
	caKey, err := os.ReadFile(filepath.Join(dir, pki.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 24)
	_, _ = rand.Read(secret)

	x, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nw, err := cli.NetworkCreate(x, d.prefix, network.CreateOptions{Driver: "bridge", Labels: map[string]string{dockerClusterLabel: d.prefix}})
	if err != nil {
		t.Fatalf("create network %s: %v", d.prefix, err)
	}
	d.netID = nw.ID
	t.Cleanup(d.cleanup)

	var nodes []string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("m%d", i)
		nodes = append(nodes, fmt.Sprintf("  - {name: %s, raft: \"%s:6792\", api: \"https://%s:6790\"}\n", name, name, name))
	}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("m%d", i)
		cfg := fmt.Sprintf(`nodeName: %s
dataDir: /data
listen: 0.0.0.0:6790
advertiseUrl: https://%s:6790
tls: "on"
tlsCaFile: /etc/norsk/ca.pem
tlsCaKeyFile: /etc/norsk/ca-key.pem
tlsHosts: [%s]
clusterState: new
raftListen: 0.0.0.0:6792
raftAdvertise: %s:6792
clusterSecretFile: /etc/norsk/cluster-secret
clusterNodes:
%s`, name, name, name, name, strings.Join(nodes, ""))
		files := tarFiles(t, map[string][]byte{
			"etc/norsk/config.yaml":    []byte(cfg),
			"etc/norsk/ca.pem":         caPEM,
			"etc/norsk/ca-key.pem":     caKey,
			"etc/norsk/cluster-secret": []byte(hex.EncodeToString(secret) + "\n"),
		})
		port := nat.Port("6790/tcp")
		created, err := cli.ContainerCreate(x,
			&container.Config{
				Image:        memberImage,
				Hostname:     name,
				Cmd:          []string{"run", "--config", "/etc/norsk/config.yaml"},
				Env:          []string{"NORSK_BOOTSTRAP_TOKEN=" + d.token, "TMPDIR=/data"},
				ExposedPorts: nat.PortSet{port: struct{}{}},
				Labels:       map[string]string{dockerClusterLabel: d.prefix},
			},
			&container.HostConfig{PortBindings: nat.PortMap{port: {{HostIP: "127.0.0.1", HostPort: ""}}}},
			&network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{d.prefix: {Aliases: []string{name}}}},
			nil, d.prefix+"-"+name)
		if err != nil {
			t.Fatalf("create container for %s: %v", name, err)
		}
		m := &dockerMember{d: d, name: name, id: created.ID}
		d.members = append(d.members, m)
		if err := cli.CopyToContainer(x, created.ID, "/", files, container.CopyToContainerOptions{}); err != nil {
			t.Fatalf("copy the config into %s: %v", name, err)
		}
	}
	for _, m := range d.members {
		m.start()
	}
	return d
}

// tarFiles is a tar stream of files (with their directories).
func tarFiles(t *testing.T, files map[string][]byte) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for d := filepath.Dir(name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(files[name])), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// cleanup removes the test's containers and network (logging the members'
// last lines first when the test failed).
func (d *dockerMembers) cleanup() {
	x, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range d.members {
		m.mu.Lock()
		if m.client != nil {
			_ = m.client.Close()
			m.client = nil
		}
		m.mu.Unlock()
		if d.t.Failed() {
			d.t.Logf("--- last log lines of %s ---\n%s", m.name, m.logs(60))
		}
		if err := d.cli.ContainerRemove(x, m.id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			d.t.Logf("cleanup: remove container %s: %v", m.name, err)
		}
	}
	if err := d.cli.NetworkRemove(x, d.netID); err != nil {
		d.t.Logf("cleanup: remove network %s: %v", d.prefix, err)
	}
}

func (d *dockerMembers) member(name string) *dockerMember {
	for _, m := range d.members {
		if m.name == name {
			return m
		}
	}
	d.t.Fatalf("no member %s", name)
	return nil
}

func (d *dockerMembers) others(not ...*dockerMember) []*dockerMember {
	var out []*dockerMember
	for _, m := range d.members {
		skip := false
		for _, n := range not {
			skip = skip || n == m
		}
		if !skip {
			out = append(out, m)
		}
	}
	return out
}

// eventually polls cond every 100 ms until it holds, failing the test after
// timeout.
func (d *dockerMembers) eventually(what string, timeout time.Duration, cond func() bool) {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			d.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// start starts (or restarts) the member's container and learns its
// published API port.
func (m *dockerMember) start() {
	t := m.d.t
	t.Helper()
	x, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.d.cli.ContainerStart(x, m.id, container.StartOptions{}); err != nil {
		t.Fatalf("start %s: %v", m.name, err)
	}
	m.refreshPort()
}

// refreshPort learns the member's published API port (a new one after each
// start and each network reconnect).
func (m *dockerMember) refreshPort() {
	t := m.d.t
	t.Helper()
	x, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := m.d.cli.ContainerInspect(x, m.id)
	if err != nil {
		t.Fatalf("inspect %s: %v", m.name, err)
	}
	var port string
	for _, b := range info.NetworkSettings.Ports["6790/tcp"] {
		if b.HostIP == "127.0.0.1" || port == "" {
			port = b.HostPort
		}
	}
	if port == "" {
		t.Fatalf("%s: no published API port: %v", m.name, info.NetworkSettings.Ports)
	}
	m.mu.Lock()
	if m.client != nil && m.port != port {
		_ = m.client.Close()
		m.client = nil
	}
	m.port = port
	m.mu.Unlock()
}

// kill sends SIGKILL to the member's process (kill -9).
func (m *dockerMember) kill() {
	m.d.t.Helper()
	if err := m.d.cli.ContainerKill(context.Background(), m.id, "KILL"); err != nil {
		m.d.t.Fatalf("kill %s: %v", m.name, err)
	}
	m.dropClient()
}

// stop stops the member (SIGTERM, then SIGKILL after 5 s).
func (m *dockerMember) stop() {
	m.d.t.Helper()
	timeout := 5
	if err := m.d.cli.ContainerStop(context.Background(), m.id, container.StopOptions{Timeout: &timeout}); err != nil {
		m.d.t.Fatalf("stop %s: %v", m.name, err)
	}
	m.dropClient()
}

// disconnect cuts the member off the cluster's network; connect puts it
// back (with its alias, so the others find it again).
func (m *dockerMember) disconnect() {
	m.d.t.Helper()
	if err := m.d.cli.NetworkDisconnect(context.Background(), m.d.netID, m.id, true); err != nil {
		m.d.t.Fatalf("disconnect %s: %v", m.name, err)
	}
}

func (m *dockerMember) connect() {
	m.d.t.Helper()
	if err := m.d.cli.NetworkConnect(context.Background(), m.d.netID, m.id, &network.EndpointSettings{Aliases: []string{m.name}}); err != nil {
		m.d.t.Fatalf("reconnect %s: %v", m.name, err)
	}
	m.refreshPort() // the engine publishes the port anew

}

func (m *dockerMember) dropClient() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.client != nil {
		_ = m.client.Close()
		m.client = nil
	}
}

// url is the member's API as the test reaches it.
func (m *dockerMember) url() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return "https://127.0.0.1:" + m.port
}

// sdk returns a connection to the member (nil and the error while it does
// not answer).
func (m *dockerMember) sdk(x context.Context) (*norsk.Manager, error) {
	m.mu.Lock()
	c, port := m.client, m.port
	m.mu.Unlock()
	if c != nil {
		return c, nil
	}
	cctx, cancel := context.WithTimeout(x, 2*time.Second)
	defer cancel()
	c, err := norsk.Connect(cctx, norsk.Settings{URL: "https://127.0.0.1:" + port, Token: m.d.token, CAFile: m.d.caFile, ClientLabel: "docker-cluster-test"})
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.client != nil || m.port != port {
		_ = c.Close()
		if m.client == nil {
			return nil, fmt.Errorf("%s restarted meanwhile", m.name)
		}
		return m.client, nil
	}
	m.client = c
	return c, nil
}

// status is the member's GetClusterStatus (nil while it does not answer).
func (m *dockerMember) status() *norsk.ClusterStatus {
	x, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := m.sdk(x)
	if err != nil {
		return nil
	}
	st, err := c.GetClusterStatus(x)
	if err != nil {
		return nil
	}
	return st
}

// logs is the member's last n log lines.
func (m *dockerMember) logs(n int) string {
	x, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := m.d.cli.ContainerLogs(x, m.id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: fmt.Sprint(n)})
	if err != nil {
		return "(logs: " + err.Error() + ")"
	}
	defer rc.Close()
	var buf bytes.Buffer
	_, _ = stdcopy.StdCopy(&buf, &buf, rc)
	return buf.String()
}

// ctl runs norsk-ctl (its code, in this process) against the member with
// the test's CA file and admin token.
func (m *dockerMember) ctl(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	x, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = cli.Main(x, append([]string{"--manager-url", m.url(), "--tls-ca", m.d.caFile, "--token", m.d.token}, args...), strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// primary waits until one of members reports itself the primary, with a
// quorum, and returns it.
func (d *dockerMembers) primary(timeout time.Duration, among ...*dockerMember) *dockerMember {
	d.t.Helper()
	if len(among) == 0 {
		among = d.members
	}
	var p *dockerMember
	d.eventually("a primary among the members", timeout, func() bool {
		for _, m := range among {
			st := m.status()
			if st != nil && st.GetQuorumHealthy() && st.GetPrimary() == m.name && st.GetAnsweredBy() == m.name {
				p = m
				return true
			}
		}
		return false
	})
	return p
}

// kvWriter commits KV writes, one after another, through one member, and
// records when each was acknowledged.
type kvWriter struct {
	ns     string
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	acked  []string
	ackAt  []time.Time
	sentAt []time.Time
	failed int
	errs   []string
}

func startKVWriter(t *testing.T, via *dockerMember, ns string) *kvWriter {
	x, cancel := context.WithCancel(context.Background())
	w := &kvWriter{ns: ns, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; x.Err() == nil; i++ {
			key := fmt.Sprintf("%s-%06d", via.name, i)
			sent := time.Now()
			wctx, wcancel := context.WithTimeout(x, 3*time.Second)
			c, err := via.sdk(wctx)
			if err == nil {
				_, err = c.KvCommit(wctx, ns, []norsk.KvWrite{{Key: key, Value: []byte(via.name)}}, norsk.KvCommitOptions{})
			}
			wcancel()
			if x.Err() != nil {
				return // stopped: the outcome of this write is unknown
			}
			now := time.Now()
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, key)
				w.ackAt = append(w.ackAt, now)
				w.sentAt = append(w.sentAt, sent)
			} else {
				w.failed++
				if len(w.errs) < 5 {
					w.errs = append(w.errs, err.Error())
				}
			}
			w.mu.Unlock()
			if err != nil {
				time.Sleep(20 * time.Millisecond)
			} else {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *kvWriter) stop() {
	w.cancel()
	<-w.done
}

func (w *kvWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// waitMore waits until n more writes than now are acknowledged.
func (w *kvWriter) waitMore(d *dockerMembers, n int, timeout time.Duration) {
	d.t.Helper()
	target := w.count() + n
	d.eventually(fmt.Sprintf("%d acknowledged writes", target), timeout, func() bool { return w.count() >= target })
}

// ackedKeys is every acknowledged key so far.
func (w *kvWriter) ackedKeys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.acked...)
}

// around returns the last acknowledgement at or before t and the first
// acknowledgement of a write sent after t.
func (w *kvWriter) around(t time.Time) (before, after time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, at := range w.ackAt {
		if !at.After(t) {
			before = at
		} else if after.IsZero() && w.sentAt[i].After(t) {
			after = at
		}
	}
	return before, after
}

func (w *kvWriter) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%d acknowledged, %d failed (first errors: %q)", len(w.acked), w.failed, w.errs)
}

// holdsAll waits until the member's own copy (a local read) holds every
// key.
func (d *dockerMembers) holdsAll(m *dockerMember, ns string, keys []string, timeout time.Duration) {
	d.t.Helper()
	var missing []string
	var lastErr error
	defer func() {
		if d.t.Failed() && lastErr != nil {
			d.t.Logf("%s: last error reading its copy: %v", m.name, lastErr)
		}
	}()
	d.eventually(fmt.Sprintf("%s to hold all %d acknowledged writes", m.name, len(keys)), timeout, func() bool {
		x, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := m.sdk(x)
		if err != nil {
			lastErr = err
			return false
		}
		entries, _, err := c.KvList(x, ns, "")
		if err != nil {
			lastErr = err
			return false
		}
		have := make(map[string]bool, len(entries))
		for _, e := range entries {
			have[e.GetKey()] = true
		}
		missing = missing[:0]
		for _, k := range keys {
			if !have[k] {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 && len(missing) < 5 {
			d.t.Logf("%s misses %v so far", m.name, missing)
		}
		return len(missing) == 0
	})
}

// primaryWatch polls every member's status and records which member
// reported itself primary in which (generation, term).
type primaryWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	leads  map[[2]uint64]map[string]bool
}

func watchPrimaries(t *testing.T, d *dockerMembers) *primaryWatch {
	x, cancel := context.WithCancel(context.Background())
	pw := &primaryWatch{cancel: cancel, done: make(chan struct{}), leads: map[[2]uint64]map[string]bool{}}
	go func() {
		defer close(pw.done)
		for x.Err() == nil {
			var wg sync.WaitGroup
			for _, m := range d.members {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st := m.status()
					if st == nil || st.GetAnsweredBy() != m.name || st.GetPrimary() != m.name {
						return
					}
					for _, mb := range st.GetMembers() {
						if mb.GetName() == m.name && mb.GetRole() == norsk.MemberRolePrimary {
							k := [2]uint64{st.GetGeneration(), st.GetTerm()}
							pw.mu.Lock()
							if pw.leads[k] == nil {
								pw.leads[k] = map[string]bool{}
							}
							pw.leads[k][m.name] = true
							pw.mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			select {
			case <-x.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(pw.stop)
	return pw
}

func (pw *primaryWatch) stop() {
	pw.cancel()
	<-pw.done
}

// check fails the test if two members reported themselves primary in one
// term of one generation, and logs who led when.
func (pw *primaryWatch) check(t *testing.T) {
	t.Helper()
	pw.stop()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var keys [][2]uint64
	for k := range pw.leads {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	var seen []string
	for _, k := range keys {
		var names []string
		for n := range pw.leads[k] {
			names = append(names, n)
		}
		sort.Strings(names)
		seen = append(seen, fmt.Sprintf("gen %d term %d: %s", k[0], k[1], strings.Join(names, ",")))
		if len(names) > 1 {
			t.Errorf("two primaries in generation %d term %d: %v", k[0], k[1], names)
		}
	}
	t.Logf("primaries seen: %s", strings.Join(seen, "; "))
}

// primariesAfter returns who reported itself primary at generation gen in
// a term after term, with the highest such term each.
func (pw *primaryWatch) primariesAfter(gen, term uint64) map[string]uint64 {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	out := map[string]uint64{}
	for k, names := range pw.leads {
		if k[0] == gen && k[1] > term {
			for n := range names {
				out[n] = max(out[n], k[1])
			}
		}
	}
	return out
}

// lastTerm is the highest term in which some member reported itself
// primary at generation gen (0: none seen).
func (pw *primaryWatch) lastTerm(gen uint64) uint64 {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var last uint64
	for k := range pw.leads {
		if k[0] == gen {
			last = max(last, k[1])
		}
	}
	return last
}

// startWorker registers a slot and runs a worker (process runtime) in the
// test process, given every member's published URL; the members dial it
// back at the private network's gateway. It returns the worker's data
// directory. The worker stops when the test ends.
func (d *dockerMembers) startWorker(name string) string {
	t := d.t
	t.Helper()
	var slotToken string
	d.eventually("a slot for "+name, 30*time.Second, func() bool {
		p := d.primary(30 * time.Second)
		c, err := p.sdk(ctx(t))
		if err != nil {
			return false
		}
		slot, err := c.RegisterClusterNode(ctx(t), name, "")
		if err != nil {
			t.Logf("register slot %s: %v", name, err)
			return false
		}
		slotToken = slot.GetToken()
		return true
	})
	x, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nw, err := d.cli.NetworkInspect(x, d.netID, network.InspectOptions{})
	if err != nil || len(nw.IPAM.Config) == 0 || nw.IPAM.Config[0].Gateway == "" {
		t.Fatalf("the private network's gateway: %v %+v", err, nw.IPAM)
	}
	gw := nw.IPAM.Config[0].Gateway
	port := testcluster.FreePort(t, "0.0.0.0")
	var urls []string
	for _, m := range d.members {
		urls = append(urls, m.url())
	}
	dir := t.TempDir()
	a, err := worker.New(worker.Config{
		ManagerURL: strings.Join(urls, ","),
		TLSCAFile:  d.caFile,
		Token:      slotToken,
		DataDir:    dir,
		Runtime:    "process",
		Listen:     fmt.Sprintf("0.0.0.0:%d", port),
		Advertise:  fmt.Sprintf("%s:%d", gw, port),
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("worker %s: %v", name, err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(wctx) }()
	t.Cleanup(func() {
		stop()
		<-done
		// The instances outlive the worker by design: stop them.
		rt, err := process.New(process.Config{NodeID: name, ClusterID: worker.ClusterIDOf(dir), Dir: filepath.Join(dir, "process"), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return
		}
		sts, _ := rt.List(context.Background())
		for _, st := range sts {
			_ = rt.Remove(context.Background(), st.Key)
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("worker %s stopped at start: %v", name, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %s not ready", name)
	}
	return dir
}
