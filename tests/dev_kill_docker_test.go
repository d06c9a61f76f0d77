package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/internal/testimage"
	"github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Issue 12, item 1, with real processes: `norsk-manager dev --workers 3`
// on the Docker runtime runs three bundles; dev is killed with kill -9 (its
// workers live on), dev is started again on the same data directory (it
// keeps the live workers rather than starting a second over each), and one
// worker is killed with kill -9 (dev starts it again later, as a rebooted
// node). Once the killed node's jobs have moved (once) and its worker has
// come back, every job runs exactly once — one container per instance in
// this cluster — and nothing is restarted again: before the fix two
// workers per node took the node from each other and jobs restarted every
// ~15 s without end.
func TestDevKillScenarioWithRealProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts and kills real norsk-manager dev processes")
	}
	cli := testimage.EnsureImage(t, testProgImage, runtimetest.TestProgPackage)
	bin := buildManager(t)
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", testcluster.FreePort(t, "127.0.0.1"))
	workerDirs := []string{}
	for i := 1; i <= 3; i++ {
		workerDirs = append(workerDirs, filepath.Join(dir, "workers", fmt.Sprintf("dev-worker-%d", i)))
	}
	t.Cleanup(func() { cleanupDev(t, cli, workerDirs) })

	dev := startDevProcess(t, bin, dir, listen)
	cl := devClient(t, dir, listen)
	waitOnlineNodes(t, cl, 3)
	cluster := worker.ClusterIDOf(workerDirs[0])
	if cluster == "" {
		t.Fatal("the dev worker knows no cluster id")
	}
	ids := []string{"d1", "d2", "d3"}
	for _, id := range ids {
		if _, err := cl.CreateBundle(ctx(t), imageBundle(id)); err != nil {
			t.Fatalf("create bundle %s: %v", id, err)
		}
	}
	keys := bundleKeys(ids)
	waitAllRunning(t, cl, keys)
	pids := workerPIDs(t, workerDirs)

	// kill -9 dev: its workers live on. dev again on the same directory.
	dev.kill9(t)
	_ = cl.Close()
	startDevProcess(t, bin, dir, listen)
	cl = devClient(t, dir, listen)
	waitOnlineNodes(t, cl, 3)
	if again := workerPIDs(t, workerDirs); fmt.Sprint(again) != fmt.Sprint(pids) {
		t.Fatalf("worker pids %v after dev's restart, want the live workers %v kept", again, pids)
	}

	// kill -9 one worker; dev starts it again after its reboot delay.
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pid, held, err := worker.LockHolder(workerDirs[0])
		if err == nil && held && pid != pids[0] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev did not start the killed worker again (lock %d, %v, %v)", pid, held, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	waitOnlineNodes(t, cl, 3)

	// Settled: every instance runs, once.
	var settled map[string]uint64
	deadline = time.Now().Add(2 * time.Minute)
	for {
		tokens, ok := runningOnce(t, cl, cli, cluster, keys)
		if ok {
			settled = tokens
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the jobs did not settle to one running copy each")
		}
		time.Sleep(500 * time.Millisecond)
	}
	// And stay so, longer than the ~15 s period of the old flapping.
	end := time.Now().Add(20 * time.Second)
	for time.Now().Before(end) {
		tokens, ok := runningOnce(t, cl, cli, cluster, keys)
		if !ok || fmt.Sprint(tokens) != fmt.Sprint(settled) {
			t.Fatalf("after settling, bindings %v (one copy each: %v), were %v", tokens, ok, settled)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// devProcess is a `norsk-manager dev` process.
type devProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startDevProcess runs `norsk-manager dev --workers 3` on the Docker runtime
// over dir; it is stopped (SIGTERM: its workers stop, their containers run
// on) when the test ends.
func startDevProcess(t *testing.T, bin, dir, listen string) *devProcess {
	t.Helper()
	cmd := exec.Command(bin, "dev", "--workers", "3", "--data-dir", dir, "--listen", listen, "--runtime", "docker",
		"--no-demo", "--no-console", "--lost-grace", "2s", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if !testing.Verbose() {
		cmd.Stdout, cmd.Stderr = nil, nil
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &devProcess{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

func (d *devProcess) kill9(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done
}

// devClient connects to dev's Manager with its admin token, once it serves.
func devClient(t *testing.T, dir, listen string) *norsk.Manager {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute) // dev may build its example images first
	for {
		tok, err := os.ReadFile(filepath.Join(dir, "admin.token"))
		if err == nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cl, err := norsk.Connect(cctx, norsk.Settings{URL: "http://" + listen, Token: strings.TrimSpace(string(tok))})
			cancel()
			if err == nil {
				return cl
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev does not serve at %s: %v", listen, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func waitOnlineNodes(t *testing.T, cl *norsk.Manager, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		nodes, err := cl.ListNodes(ctx(t))
		online := 0
		for _, node := range nodes {
			if node.GetState() == norsk.NodeStateOnline {
				online++
			}
		}
		if err == nil && online == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes online (%v): %v", online, n, err, nodes)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// imageBundle is resilientBundle on the test program's image.
func imageBundle(id string) *norsk.Bundle {
	tmpl := imageJob("template", runtimetest.Behaviour{})
	tmpl.JobId = ""
	return &norsk.Bundle{
		BundleId: id,
		Jobs: []*norsk.BundleJobSpec{{
			JobName:      "channel",
			Requirements: &norsk.JobRequirements{RequiredCapacity: 0.25},
			Job:          tmpl,
		}},
		ResiliencePolicy: &norsk.ResiliencePolicy{SameNode: norsk.AntiAffinityForbid},
	}
}

// bundleKeys are the job/role keys of the bundles' instances.
func bundleKeys(ids []string) [][2]string {
	var out [][2]string
	for _, id := range ids {
		out = append(out, [2]string{id + ".channel.0", "primary"}, [2]string{id + ".channel.1", "backup"})
	}
	return out
}

func waitAllRunning(t *testing.T, cl *norsk.Manager, keys [][2]string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		all := true
		for _, k := range keys {
			jh, err := cl.JobById(ctx(t), k[0])
			if err != nil || testcluster.Instance(jh, k[1]).GetPhase() != norsk.InstancePhaseRunning {
				all = false
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the bundles' instances are not all running")
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// runningOnce reports the binding (fencing token) of every instance, and
// whether each runs, in the store and as exactly one running container of
// the cluster on the engine.
func runningOnce(t *testing.T, cl *norsk.Manager, cli *client.Client, cluster string, keys [][2]string) (map[string]uint64, bool) {
	t.Helper()
	cs, err := cli.ContainerList(ctx(t), container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", runtime.LabelCluster+"="+cluster))})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	copies := map[string]int{}
	for _, c := range cs {
		copies[c.Labels[runtime.LabelJob]+"/"+c.Labels[runtime.LabelRole]]++
	}
	tokens := map[string]uint64{}
	ok := true
	for _, k := range keys {
		key := k[0] + "/" + k[1]
		jh, err := cl.JobById(ctx(t), k[0])
		if err != nil {
			t.Logf("job %s: %v", k[0], err)
			return nil, false
		}
		in := testcluster.Instance(jh, k[1])
		tokens[key] = in.GetFencingToken()
		if in.GetPhase() != norsk.InstancePhaseRunning || copies[key] != 1 {
			t.Logf("%s: %v, %d running containers", key, in.GetPhase(), copies[key])
			ok = false
		}
	}
	return tokens, ok
}

// workerPIDs are the pids holding the workers' data directories.
func workerPIDs(t *testing.T, dirs []string) []int {
	t.Helper()
	var out []int
	for _, d := range dirs {
		pid, held, err := worker.LockHolder(d)
		if err != nil || !held || pid == 0 {
			t.Fatalf("no live worker over %s (%d, %v, %v)", d, pid, held, err)
		}
		out = append(out, pid)
	}
	return out
}

// cleanupDev kills whatever worker still holds one of dirs and removes the
// containers of the dev system's cluster.
func cleanupDev(t *testing.T, cli *client.Client, dirs []string) {
	cluster := ""
	for _, d := range dirs {
		if cluster == "" {
			cluster = worker.ClusterIDOf(d)
		}
		if pid, held, err := worker.LockHolder(d); err == nil && held && pid > 0 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if cluster == "" {
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := cli.ContainerList(cctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", runtime.LabelCluster+"="+cluster))})
	if err != nil {
		t.Logf("cleanup: list containers: %v", err)
		return
	}
	for _, c := range cs {
		if err := cli.ContainerRemove(cctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			t.Logf("cleanup: remove container %s: %v", c.ID, err)
		}
	}
}
