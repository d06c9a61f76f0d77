package tests

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/internal/testimage"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Issue 12, item 2: two Managers (two clusters) with a node of the same
// name on one host — a `dev --ephemeral` started beside a stopped `dev`.
// The first cluster's worker is stopped with its job running; the second
// cluster's worker of the same name starts with no records of its own and
// runs a job of the same id; the first's worker comes back. Neither removes
// the other's job, the first's runs on untouched (the same container or
// process, its binding and history unchanged), and each worker labels what
// it makes with its own cluster id. With Docker both share one engine;
// with the process runtime each worker keeps its services in its own data
// directory (the worker package's
// TestClustersSharingARuntimeNeverTouchEachOther shares one).
func TestTwoClustersWithOneNodeNameNeverRemoveEachOthersJobs(t *testing.T) {
	t.Parallel()
	for _, rt := range []string{"docker", "process"} {
		t.Run(rt, func(t *testing.T) { testTwoClusters(t, rt) })
	}
}

func testTwoClusters(t *testing.T, rt string) {
	var cli *client.Client
	if rt == "docker" {
		cli = testimage.EnsureImage(t, testProgImage, runtimetest.TestProgPackage) // skips without an engine
	}
	prefix := dockerPrefix()
	opts := testcluster.Options{Workers: 1, LostGrace: 2 * time.Minute}
	newCluster := func() *testcluster.Cluster {
		if rt == "docker" {
			return newDockerClusterNamed(t, opts, prefix).Cluster
		}
		o := opts
		o.WorkerPrefix = prefix
		return testcluster.New(t, o)
	}
	jobOf := func() *norsk.Job {
		if rt == "docker" {
			return imageJob("same", runtimetest.Behaviour{})
		}
		return progJob(t, "same", runtimetest.Behaviour{}, nil)
	}
	node := prefix + "-1"

	a := newCluster()
	if _, err := a.Client().CreateJob(ctx(t), jobOf()); err != nil {
		t.Fatal(err)
	}
	tokenA, err := a.Client().StartJob(ctx(t), "same", "primary", node, norsk.StartJobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.WaitPhase("same", "primary", norsk.InstancePhaseRunning)
	historyA := len(a.Job("same").GetHistory())
	copyA := runningCopy(t, cli, a, node, "same")
	if copyA == "" {
		t.Fatal("the first cluster's job runs nothing")
	}
	// The first system stops (its worker; the job runs on).
	if err := a.Worker(node).Stop(); err != nil {
		t.Fatal(err)
	}

	b := newCluster()
	if a.ClusterID() == "" || a.ClusterID() == b.ClusterID() {
		t.Fatalf("cluster ids %q and %q: want two", a.ClusterID(), b.ClusterID())
	}
	if got := runningCopy(t, cli, a, node, "same"); got != copyA {
		t.Fatalf("the second cluster's worker took the first's job: it runs as %q, was %q", got, copyA)
	}
	if _, err := b.Client().CreateJob(ctx(t), jobOf()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client().StartJob(ctx(t), "same", "primary", node, norsk.StartJobOptions{}); err != nil {
		t.Fatal(err)
	}
	b.WaitPhase("same", "primary", norsk.InstancePhaseRunning)
	copyB := runningCopy(t, cli, b, node, "same")
	if copyB == "" || copyB == copyA {
		t.Fatalf("the second cluster's job runs as %q (the first's: %q)", copyB, copyA)
	}

	// The first system comes back: its worker adopts its job, untouched,
	// and leaves the second's alone.
	a.Worker(node).Start()
	a.WaitNodeState(node, norsk.NodeStateOnline)
	consistently(t, 2*time.Second, "both jobs running, each its own", func() bool {
		jh := a.Job("same")
		in := testcluster.Instance(jh, "primary")
		return in.GetPhase() == norsk.InstancePhaseRunning && in.GetFencingToken() == tokenA && len(jh.GetHistory()) == historyA &&
			runningCopy(t, cli, a, node, "same") == copyA && runningCopy(t, cli, b, node, "same") == copyB
	})
}

// runningCopy names what runs the job on the cluster's node: the running
// container (its id) labelled with the cluster's id, or the running
// process (its pid); "" when none runs.
func runningCopy(t *testing.T, cli *client.Client, c *testcluster.Cluster, node, jobID string) string {
	t.Helper()
	if cli == nil {
		if pid := pidOf(t, c, node, jobID, "primary"); pid != 0 {
			return "pid " + strconv.Itoa(pid)
		}
		return ""
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := cli.ContainerList(cctx, container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", runtime.LabelNode+"="+node),
		filters.Arg("label", runtime.LabelJob+"="+jobID),
		filters.Arg("label", runtime.LabelCluster+"="+c.ClusterID()),
	)})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	if len(cs) != 1 {
		return ""
	}
	return cs[0].ID
}
