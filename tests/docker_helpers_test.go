package tests

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/internal/testimage"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// testProgImage is the test program as an image, built FROM scratch (the
// same tag the docker runtime's own tests use; nothing is ever pulled).
const testProgImage = "norsk-testprog:test"

// dockerCluster is a cluster whose workers use the docker runtime, with an
// engine client for looking at what they create.
type dockerCluster struct {
	*testcluster.Cluster
	cli *client.Client
	// worker is the name of the first worker (also the node label of its
	// containers).
	worker string
}

// newDockerCluster builds the test program image (skipping the test when no
// Docker engine answers) and starts a cluster of docker-runtime workers.
// The workers get a name no other cluster on the engine uses (a worker
// touches only its own cluster's containers anyway), so that every
// container labelled with one of its workers' names can be removed when the
// test ends, after the cluster has stopped, whatever the test's outcome.
func newDockerCluster(t *testing.T, opts testcluster.Options) *dockerCluster {
	t.Helper()
	return newDockerClusterNamed(t, opts, dockerPrefix())
}

// dockerPrefix is a worker name prefix no other cluster on the engine uses.
func dockerPrefix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "dk" + hex.EncodeToString(b[:])
}

// newDockerClusterNamed is newDockerCluster with the workers named
// prefix-1 … prefix-N: clusters given the same prefix have nodes of the same
// names on the engine.
func newDockerClusterNamed(t *testing.T, opts testcluster.Options, prefix string) *dockerCluster {
	t.Helper()
	cli := testimage.EnsureImage(t, testProgImage, runtimetest.TestProgPackage)
	if opts.Workers == 0 {
		opts.Workers = 1
	}
	opts.Runtime = "docker"
	opts.WorkerPrefix = prefix
	// Registered before the cluster so that it runs after the cluster's
	// own shutdown (cleanups run last-in first-out).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true})
		if err != nil {
			t.Logf("cleanup: list containers: %v", err)
			return
		}
		for _, ct := range cs {
			if !strings.HasPrefix(ct.Labels[runtime.LabelNode], prefix+"-") {
				continue
			}
			if err := cli.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
				t.Logf("cleanup: remove container %s: %v", ct.ID, err)
			}
		}
	})
	c := testcluster.New(t, opts)
	return &dockerCluster{Cluster: c, cli: cli, worker: prefix + "-1"}
}

// containers lists the containers (in every state) the node holds for a
// job.
func (d *dockerCluster) containers(t testing.TB, node, jobID string) []container.Summary {
	t.Helper()
	cs, err := d.cli.ContainerList(ctx(t), container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", runtime.LabelNode+"="+node),
		filters.Arg("label", runtime.LabelJob+"="+jobID),
	)})
	if err != nil {
		t.Fatalf("list containers of %s/%s: %v", node, jobID, err)
	}
	return cs
}

// onlyContainer inspects the one container the node holds for a job.
func (d *dockerCluster) onlyContainer(t testing.TB, node, jobID string) container.InspectResponse {
	t.Helper()
	cs := d.containers(t, node, jobID)
	if len(cs) != 1 {
		t.Fatalf("containers of %s/%s = %d, want 1: %v", node, jobID, len(cs), cs)
	}
	info, err := d.cli.ContainerInspect(ctx(t), cs[0].ID)
	if err != nil {
		t.Fatalf("inspect %s: %v", cs[0].ID, err)
	}
	return info
}

// imageJob is a job whose one service, "main", runs the test program image
// with b (ports ephemeral).
func imageJob(id string, b runtimetest.Behaviour) *norsk.Job {
	return &norsk.Job{
		JobId: id,
		Services: []*norsk.Service{{
			Name:  "main",
			Image: testProgImage,
			Args:  b.Args(),
			Ports: portsFor(b),
		}},
	}
}

// answers dials host:port and reports whether the test program greets
// ("testprog"): a published Docker port accepts connections (docker-proxy)
// before the program listens, so a bare dial proves little.
func answers(url string) bool {
	conn, err := net.DialTimeout("tcp", url, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && line == "testprog\n"
}

// bridgeGateway is the address at which a container on Docker's default
// bridge network reaches the Docker host.
func bridgeGateway(t testing.TB, cli *client.Client) string {
	t.Helper()
	nw, err := cli.NetworkInspect(ctx(t), "bridge", network.InspectOptions{})
	if err == nil {
		for _, cfg := range nw.IPAM.Config {
			if ip := net.ParseIP(cfg.Gateway); ip != nil && ip.To4() != nil {
				return cfg.Gateway
			}
		}
		// The engine may leave the gateway out of the IPAM config (20.10
		// does for the default bridge); the bridge then has the subnet's
		// first address.
		for _, cfg := range nw.IPAM.Config {
			if p, err := netip.ParsePrefix(cfg.Subnet); err == nil && p.Addr().Is4() {
				return p.Masked().Addr().Next().String()
			}
		}
	}
	t.Logf("no gateway or subnet in the bridge network (%v); assuming 172.17.0.1", err)
	return "172.17.0.1"
}

// portURLs lists every resolved port URL of an instance.
func portURLs(in *norsk.Instance) []string {
	var out []string
	for _, m := range in.GetServicePortMappings() {
		for _, p := range m.GetMappings() {
			out = append(out, p.GetUrl())
		}
	}
	return out
}

// waitAnswer waits until one of the instance's resolved port URLs answers
// (see answers) and returns it.
func (d *dockerCluster) waitAnswer(in *norsk.Instance) string {
	var url string
	d.Eventually("a resolved port of "+in.GetJobId()+" to answer", func() bool {
		for _, u := range portURLs(in) {
			if answers(u) {
				url = u
				return true
			}
		}
		return false
	})
	return url
}

// consistently checks cond every 20 ms for d and fails the test the first
// time it does not hold: for asserting that something does not happen
// within a period.
func consistently(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if !cond() {
			t.Fatalf("%s stopped holding", what)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stoppingEntry returns the newest stopping entry of a job's history.
func stoppingEntry(jh *norsk.JobWithHistory) *norsk.InstanceStopping {
	for _, e := range jh.GetHistory() {
		if s := e.GetStopping(); s != nil {
			return s
		}
	}
	return nil
}
