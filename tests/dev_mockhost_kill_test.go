package tests

import (
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

// Issue 15's scenario on the dev system itself: `norsk-manager dev
// --mock-hosts 4 --spares 1` runs each mock host as a process; a channel
// (a primary and a backup, never on one node) runs on the pool's nodes,
// the host of the primary's node is killed with
// kill -9 (the machine vanishes), and the channel comes back on the warm
// spare — which already holds its image, so nothing is pulled — running
// exactly once (the fresh host that takes the dead one's address removes
// what it ran), and the AutoManager makes a new spare.
func TestDevMockHostKilledChannelComesBackOnASpare(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts and kills real norsk-manager dev processes")
	}
	cli := testimage.EnsureImage(t, testProgImage, runtimetest.TestProgPackage)
	bin := buildManager(t)
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", testcluster.FreePort(t, "127.0.0.1"))
	cmd := exec.Command(bin, "dev", "--workers", "0", "--mock-hosts", "4", "--spares", "1", "--spares-warm-for", "channel",
		"--data-dir", dir, "--listen", listen, "--runtime", "docker", "--no-demo", "--no-console", "--lost-grace", "2s", "--log-level", "warn")
	if testing.Verbose() {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		hostDirs, _ := filepath.Glob(filepath.Join(dir, "mock-hosts", "*", "node-*"))
		cleanupDev(t, cli, hostDirs)
	})
	cl := devClient(t, dir, listen)
	waitOnlineNodes(t, cl, 1) // the spare

	b := imageBundle("warm") // a primary and a backup, never on one node
	b.Pool = "burst"
	b.Jobs[0].Requirements = &norsk.JobRequirements{RequiredCapacity: 0.25}
	if _, err := cl.CreateBundle(ctx(t), b); err != nil {
		t.Fatal(err)
	}
	jobs := []string{"warm.channel.0", "warm.channel.1"}
	// Settled: each job runs once, on nodes of their own (the AutoManager
	// repairs a first placement that had to share one), and one empty
	// spare stands by.
	var on map[string]string
	spare := ""
	cluster := ""
	pollUntil(t, 3*time.Minute, "the channel settled beside an empty spare", func() bool {
		if cluster == "" {
			if ds, _ := filepath.Glob(filepath.Join(dir, "mock-hosts", "*", "node-*")); len(ds) > 0 {
				cluster = worker.ClusterIDOf(ds[0])
			}
		}
		var ok bool
		on, ok = runsOnceEach(t, cl, cli, cluster, jobs)
		empty, _ := devSpares(t, cl)
		if !ok || on[jobs[0]] == on[jobs[1]] || len(empty) != 1 {
			return false
		}
		spare = empty[0]
		return true
	})
	node := on[jobs[0]]
	hostDir := ""
	if ds, _ := filepath.Glob(filepath.Join(dir, "mock-hosts", "*", "node-"+node)); len(ds) == 1 {
		hostDir = filepath.Dir(ds[0])
	}
	pid := mockHostPID(t, hostDir)
	if pid == 0 {
		t.Fatalf("node %s: no mock host process found (host dir %q)", node, hostDir)
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 2*time.Minute, "the channel back on the spare, running once", func() bool {
		on, ok := runsOnceEach(t, cl, cli, cluster, jobs)
		return ok && on[jobs[0]] == spare
	})
	jh, err := cl.JobById(ctx(t), jobs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range jh.GetHistory() {
		if e.GetNotice().GetKind() == "image-pull" {
			t.Errorf("the recovery onto the warm spare pulled: %v", e)
		}
	}
	pollUntil(t, 2*time.Minute, "a new spare replacing the one consumed", func() bool {
		empty, _ := devSpares(t, cl)
		return len(empty) == 1 && empty[0] != spare
	})
}

// devSpares lists the online empty spares of the mock pool.
func devSpares(t *testing.T, cl *norsk.Manager) ([]string, error) {
	nodes, err := cl.ListNodes(ctx(t))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range nodes {
		if n.GetState() == norsk.NodeStateOnline && n.GetTags()["spare"] == "true" && len(n.GetInstances()) == 0 {
			out = append(out, n.GetNodeId())
		}
	}
	return out, nil
}

// mockHostPID finds the dev-mock-host process serving hostDir.
func mockHostPID(t *testing.T, hostDir string) int {
	t.Helper()
	if hostDir == "" {
		return 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && args[1] == "dev-mock-host" && strings.Contains(string(b), "\x00"+hostDir+"\x00") {
			var pid int
			if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d", &pid); err == nil {
				return pid
			}
		}
	}
	return 0
}

// pollUntil waits for cond, checking every 250 ms, failing after timeout.
func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// runsOnceEach reports the node each job runs on, and whether each has
// exactly one running instance in the store and one running container of
// the cluster on the engine (an instance left STOPPING on a lost node
// runs nowhere).
func runsOnceEach(t *testing.T, cl *norsk.Manager, cli *client.Client, cluster string, jobs []string) (map[string]string, bool) {
	t.Helper()
	if cluster == "" {
		return nil, false
	}
	cs, err := cli.ContainerList(ctx(t), container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", runtime.LabelCluster+"="+cluster))})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	copies := map[string]int{}
	for _, c := range cs {
		copies[c.Labels[runtime.LabelJob]]++
	}
	on := map[string]string{}
	for _, id := range jobs {
		jh, err := cl.JobById(ctx(t), id)
		if err != nil {
			return nil, false
		}
		running := 0
		for _, in := range jh.GetInstances() {
			if in.GetPhase() == norsk.InstancePhaseRunning {
				running++
				on[id] = in.GetNodeId()
			}
		}
		if running != 1 || copies[id] != 1 {
			return on, false
		}
	}
	return on, true
}
