package tests

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
	"github.com/norsk-go/norsk-manager/internal/hostagent"
	"github.com/norsk-go/norsk-manager/internal/manager"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// These scenarios drive the cloud-hypervisor provider against host agents
// (internal/hostagent) whose VMMs are local VMMs serving Cloud
// Hypervisor's REST API on their API sockets (internal/chsim); each VM's
// guest boots a real worker from its first-boot disk.

const chProvider = "cloud-hypervisor"

func chCluster(t *testing.T, opts testcluster.Options) *testcluster.Cluster {
	t.Helper()
	if opts.CHHosts == 0 {
		opts.CHHosts = 1
	}
	c := testcluster.New(t, opts)
	c.Eventually("the host agents' shapes loaded", func() bool {
		types, known, err := c.Client().ListInstanceTypes(ctx(t), norsk.InstanceTypeOptions{Provider: chProvider})
		return err == nil && known && len(types) == len(testcluster.CHShapes)
	})
	return c
}

// agentClient calls host i's agent as the provider does.
func agentClient(c *testcluster.Cluster, i int) managerv1connect.HostAgentClient {
	cfg := c.CH.Configs[i]
	// A client of its own without keep-alive: http.DefaultClient's pool,
	// shared by every test, can hold an idle connection to an agent that
	// has since restarted (or to another test's, closed, at a reused port),
	// and a POST written on it fails with "unexpected EOF" (net/http does
	// not retry it) — as TestCHAgentRestartWithVMsRunning once did.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	return managerv1connect.NewHostAgentClient(hc, c.CH.Agents[i].URL(), connect.WithInterceptors(
		connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+cfg.Token)
				return next(ctx, req)
			}
		})))
}

func hostVMs(t *testing.T, c *testcluster.Cluster, i int) []*managerv1.MicroVm {
	t.Helper()
	h, err := agentClient(c, i).GetHost(ctx(t), connect.NewRequest(&managerv1.GetHostRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return h.Msg.GetVms()
}

// The seed's queries for provider cloud-hypervisor, and the refusals of a
// bad create.
func TestCHQueries(t *testing.T) {
	t.Parallel()
	c := chCluster(t, testcluster.Options{CHHosts: 2})
	cl, x := c.Client(), ctx(t)
	types, known, err := cl.ListInstanceTypes(x, norsk.InstanceTypeOptions{Provider: chProvider})
	if err != nil || !known || len(types) != 2 || types[0].GetInstanceType() != "ch.small" || types[0].GetVcpus() != 2 ||
		types[0].GetMemoryBytes() != 2<<30 || len(types[0].GetRegions()) != 2 {
		t.Fatalf("ListInstanceTypes = %v, %v, %v", types, known, err)
	}
	one, known, err := cl.ListInstanceTypes(x, norsk.InstanceTypeOptions{Provider: chProvider, Region: "ch-2"})
	if err != nil || !known || len(one) != 2 || strings.Join(one[1].GetRegions(), ",") != "ch-2" {
		t.Fatalf("ListInstanceTypes(ch-2) = %v, %v, %v", one, known, err)
	}
	it, err := cl.DescribeInstanceType(x, "ch.large", norsk.InstanceTypeOptions{Provider: chProvider, Region: "ch-1"})
	if err != nil || it == nil || it.GetVcpus() != 4 || !it.Offered {
		t.Fatalf("DescribeInstanceType(ch.large) = %v, %v", it, err)
	}
	if it, err := cl.DescribeInstanceType(x, "ch.huge", norsk.InstanceTypeOptions{Provider: chProvider}); err != nil || it != nil {
		t.Errorf("an unknown shape = %v, %v; want undefined", it, err)
	}
	if _, _, err := cl.ListInstanceTypes(x, norsk.InstanceTypeOptions{Provider: chProvider, Region: "ch-9"}); !codeIs(err, norsk.ErrFailedPrecondition) {
		t.Errorf("a host not run: %v, want FAILED_PRECONDITION", err)
	}
	for _, tc := range []struct {
		name string
		n    norsk.CloudHypervisorNode
		want error
	}{
		{"no shape", norsk.CloudHypervisorNode{Host: "ch-1"}, norsk.ErrInvalidArgument},
		{"unknown shape", norsk.CloudHypervisorNode{Host: "ch-1", Shape: "ch.huge"}, norsk.ErrInvalidArgument},
		{"host not run", norsk.CloudHypervisorNode{Host: "ch-9", Shape: "ch.small"}, norsk.ErrFailedPrecondition},
		{"no image for the version", norsk.CloudHypervisorNode{Host: "ch-1", Shape: "ch.small", WorkerVersion: "9.9.9"}, norsk.ErrFailedPrecondition},
		{"bad node id", norsk.CloudHypervisorNode{Host: "ch-1", Shape: "ch.small", NodeID: "no spaces"}, norsk.ErrInvalidArgument},
	} {
		if _, err := cl.CreateCloudHypervisorNode(x, tc.n); !codeIs(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	nodes, err := cl.ListNodes(x)
	if err != nil || len(nodes) != 0 {
		t.Errorf("refused creates left nodes: %v, %v", nodes, err)
	}
	for i := range 2 {
		if vms := hostVMs(t, c, i); len(vms) != 0 {
			t.Errorf("refused creates left VMs on %s: %v", testcluster.CHHostName(i), vms)
		}
	}
}

// Create, register, run a job, terminate: the VM is created and booted
// through the VMM's REST API, its worker registers, the node runs a job,
// and terminating it shuts the VM down and deletes it.
func TestCHNodeLifecycle(t *testing.T) {
	t.Parallel()
	c := chCluster(t, testcluster.Options{CHHosts: 2})
	cl, x := c.Client(), ctx(t)
	// No host named: the one with the most room (both empty: the first).
	n, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Shape: "ch.large", Pool: testcluster.CHPool, Tags: map[string]string{"team": "live"}})
	if err != nil {
		t.Fatal(err)
	}
	if n.GetProvider() != chProvider || n.GetImage() != testcluster.CHImage || n.GetInstanceType() != "ch.large" || !strings.HasPrefix(n.GetNodeId(), "cloud-hypervisor-") {
		t.Fatalf("created %v", n)
	}
	host := n.GetRegion()
	node := c.WaitNodeState(n.GetNodeId(), norsk.NodeStateOnline)
	if node.GetProvider() != chProvider || node.GetProviderInstance() != n.GetInstanceId() || node.GetHardware().GetVcpus() != 4 || node.GetTags()["pool"] != testcluster.CHPool {
		t.Fatalf("node %v", node)
	}
	// The next one goes to the other host (more room there).
	n2, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Shape: "ch.small"})
	if err != nil {
		t.Fatal(err)
	}
	if n2.GetRegion() == host {
		t.Errorf("second node on %s too; want the host with room", host)
	}
	hi := 0
	if host == testcluster.CHHostName(1) {
		hi = 1
	}
	vms := hostVMs(t, c, hi)
	if len(vms) != 1 || vms[0].GetState() != "Running" || vms[0].GetNodeId() != n.GetNodeId() || vms[0].GetClusterId() != testcluster.CHClusterID ||
		vms[0].GetTags()["team"] != "live" || host+"/"+vms[0].GetId() != n.GetInstanceId() {
		t.Fatalf("host %s VMs %v", host, vms)
	}
	// A job runs on it.
	if _, err := cl.CreateBundle(x, &norsk.Bundle{BundleId: "onvm", Pool: testcluster.CHPool, Jobs: []*norsk.BundleJobSpec{{
		JobName: "channel", Job: progJob(t, "", runtimetest.Behaviour{}, nil),
	}}}); err != nil {
		t.Fatal(err)
	}
	if in := running(c, "onvm.channel.0", "primary"); in.GetNodeId() != n.GetNodeId() {
		t.Fatalf("the job runs on %s; want %s", in.GetNodeId(), n.GetNodeId())
	}
	if _, err := cl.SetNodeTags(x, n.GetNodeId(), map[string]string{"rack": "r7"}); err != nil {
		t.Fatal(err)
	}
	c.Eventually("the node's new tag on its VM", func() bool {
		vms := hostVMs(t, c, hi)
		return len(vms) == 1 && vms[0].GetTags()["rack"] == "r7"
	})
	if err := cl.DeleteBundle(x, "onvm"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{n.GetNodeId(), n2.GetNodeId()} {
		if err := cl.TerminateNode(x, id); err != nil {
			t.Fatal(err)
		}
		c.WaitNodeState(id, norsk.NodeStateTerminated)
	}
	c.Eventually("the VMs deleted and their VMMs ended", func() bool {
		return len(hostVMs(t, c, 0)) == 0 && len(hostVMs(t, c, 1)) == 0 && c.CH.VMMs.Running() == 0
	})
}

// The agent restarted with VMs running finds them again through their API
// sockets: the node stays online, and terminating it still ends its VM.
// A VMM with no VM record beside it is reported and left running.
func TestCHAgentRestartWithVMsRunning(t *testing.T) {
	t.Parallel()
	c := chCluster(t, testcluster.Options{})
	cl, x := c.Client(), ctx(t)
	n, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Host: "ch-1", Shape: "ch.small"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState(n.GetNodeId(), norsk.NodeStateOnline)
	// A VMM the agent never launched, in its VM directory.
	if err := os.MkdirAll(c.CH.Configs[0].Dir+"/vms/stray", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := c.CH.VMMs.Launch(x, "stray", c.CH.Configs[0].Dir+"/vms/stray/api.sock"); err != nil {
		t.Fatal(err)
	}
	c.RestartCHAgent(0)
	h, err := agentClient(c, 0).GetHost(x, connect.NewRequest(&managerv1.GetHostRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if vms := h.Msg.GetVms(); len(vms) != 1 || vms[0].GetNodeId() != n.GetNodeId() || vms[0].GetState() != "Running" || h.Msg.GetUsedVcpus() != 2 {
		t.Fatalf("after the restart: %v", h.Msg)
	}
	if u := h.Msg.GetUnaccounted(); len(u) != 1 || !strings.HasSuffix(u[0], "/vms/stray/api.sock") {
		t.Fatalf("unaccounted = %v; want the stray VMM's socket", u)
	}
	// Reconciliation keeps the node (its VM is listed running).
	time.Sleep(time.Second) // several reconcile intervals: nothing changes
	if got := c.Node(n.GetNodeId()); got.GetState() != norsk.NodeStateOnline {
		t.Fatalf("node after the agent's restart: %v", got)
	}
	if err := cl.TerminateNode(x, n.GetNodeId()); err != nil {
		t.Fatal(err)
	}
	c.Eventually("the VM deleted", func() bool { return len(hostVMs(t, c, 0)) == 0 })
	if c.CH.VMMs.Running() != 1 {
		t.Errorf("VMMs running = %d; want the stray one, left alone", c.CH.VMMs.Running())
	}
}

// silentRunner boots guests whose worker never starts.
type silentRunner struct{}

type silentMachine struct{}

func (silentRunner) Boot(string, []byte) (cloudsim.Machine, error) { return silentMachine{}, nil }
func (silentMachine) Stop(context.Context) error                   { return nil }

// A VM whose worker never registers is terminated at the start timeout
// with the reason, and its VM deleted.
func TestCHVMThatNeverRegisters(t *testing.T) {
	t.Parallel()
	c := chCluster(t, testcluster.Options{CHRunner: silentRunner{}, ManagerConfig: func(cfg *manager.Config) { cfg.CloudStartTimeout = time.Second }})
	cl, x := c.Client(), ctx(t)
	n, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Host: "ch-1", Shape: "ch.small"})
	if err != nil {
		t.Fatal(err)
	}
	dead := c.WaitNodeState(n.GetNodeId(), norsk.NodeStateTerminated)
	if !strings.Contains(dead.GetStateReason(), "startup time exceeded") {
		t.Errorf("reason %q", dead.GetStateReason())
	}
	c.Eventually("its VM deleted", func() bool { return len(hostVMs(t, c, 0)) == 0 && c.CH.VMMs.Running() == 0 })
}

// Reconciliation both ways: a VM of the cluster that no live node owns is
// deleted (another cluster's is not touched); a node whose VM is gone is
// marked terminated with the reason.
func TestCHReconciliation(t *testing.T) {
	t.Parallel()
	c := chCluster(t, testcluster.Options{})
	cl, x := c.Client(), ctx(t)
	ag := agentClient(c, 0)
	ud := providers.UserData{NodeID: "ghost", ManagerURLs: []string{"http://127.0.0.1:1"}, Token: "nrt_x"}.Encode()
	for _, cluster := range []string{testcluster.CHClusterID, "someone-else"} {
		if _, err := ag.CreateVm(x, connect.NewRequest(&managerv1.CreateVmRequest{NodeId: "ghost", ClusterId: cluster, ClientToken: "leak-" + cluster,
			Shape: "ch.small", Image: testcluster.CHImage, UserData: ud})); err != nil {
			t.Fatal(err)
		}
	}
	c.Eventually("the leaked VM deleted", func() bool {
		vms := hostVMs(t, c, 0)
		return len(vms) == 1 && vms[0].GetClusterId() == "someone-else"
	})
	n, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Host: "ch-1", Shape: "ch.small"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState(n.GetNodeId(), norsk.NodeStateOnline)
	_, vm, _ := strings.Cut(n.GetInstanceId(), "/")
	if _, err := ag.DeleteVm(x, connect.NewRequest(&managerv1.DeleteVmRequest{Id: vm})); err != nil {
		t.Fatal(err)
	}
	gone := c.WaitNodeState(n.GetNodeId(), norsk.NodeStateTerminated)
	if !strings.Contains(gone.GetStateReason(), n.GetInstanceId()) {
		t.Errorf("reason %q: want the VM", gone.GetStateReason())
	}
	if vms := hostVMs(t, c, 0); len(vms) != 1 || vms[0].GetClusterId() != "someone-else" {
		t.Errorf("another cluster's VM was touched: %v", vms)
	}
}

// A host out of capacity: a create on it is refused RESOURCE_EXHAUSTED
// with the host's numbers, and a bundle nothing runs gets `job why`
// naming the host out of capacity instead of a node.
func TestCHHostOutOfCapacity(t *testing.T) {
	t.Parallel()
	c := chCluster(t, testcluster.Options{})
	cl, x := c.Client(), ctx(t)
	// ch.large fills the host (4 of 4 vCPUs); it serves another pool.
	full, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Host: "ch-1", Shape: "ch.large", Pool: "other"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState(full.GetNodeId(), norsk.NodeStateOnline)
	if _, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Shape: "ch.small"}); !codeIs(err, norsk.ErrResourceExhausted) ||
		!strings.Contains(err.Error(), "out of capacity") {
		t.Errorf("a create with no host room: %v; want RESOURCE_EXHAUSTED naming the host", err)
	}
	if _, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Host: "ch-1", Shape: "ch.small"}); !codeIs(err, norsk.ErrResourceExhausted) {
		t.Errorf("a create on the full host: %v; want RESOURCE_EXHAUSTED", err)
	}
	tmpl := progJob(t, "", runtimetest.Behaviour{}, nil)
	if _, err := cl.CreateBundle(x, &norsk.Bundle{BundleId: "chan", Pool: testcluster.CHPool, Jobs: []*norsk.BundleJobSpec{{
		JobName: "channel", Requirements: &norsk.JobRequirements{RequiredCapacity: 1}, Job: tmpl,
	}}}); err != nil {
		t.Fatal(err)
	}
	c.Eventually("job why names the host out of capacity", func() bool {
		why, err := cl.ExplainPlacement(x, "chan.channel.0", "", "")
		if err != nil || why.GetNodeId() != "" || why.GetElastic() == nil {
			return false
		}
		for _, r := range why.GetElastic().GetCheaper() {
			if strings.Contains(r.GetReason(), "host ch-1 is out of capacity") {
				return true
			}
		}
		return false
	})
	// Room again: the AutoManager creates the bundle's microVM node.
	if err := cl.TerminateNode(x, full.GetNodeId()); err != nil {
		t.Fatal(err)
	}
	in := running(c, "chan.channel.0", "primary")
	if node := c.Node(in.GetNodeId()); node.GetProvider() != chProvider || node.GetCloud().GetInstanceType() != "ch.small" {
		t.Fatalf("the bundle runs on %v; want a new ch.small microVM node", node)
	}
}

// norsk-ctl's Cloud Hypervisor commands: node create-ch follows the node
// until it is online; instance-types --provider cloud-hypervisor lists the
// host agents' shapes; a shape no host offers is refused.
func TestCHCLI(t *testing.T) {
	t.Parallel()
	c := chCluster(t, testcluster.Options{})
	n := ctl{t: t, url: c.URL(), token: c.Token()}
	out := n.ok("node", "create-ch", "cli-vm", "--host", "ch-1", "--shape", "ch.small", "--pool", testcluster.CHPool)
	for _, want := range []string{"Node cli-vm: cloud-hypervisor instance ch-1/vm-", "ch.small", "Node cli-vm is online (2 vCPUs)."} {
		if !strings.Contains(out, want) {
			t.Errorf("create-ch output lacks %q:\n%s", want, out)
		}
	}
	out = n.ok("instance-types", "--provider", "cloud-hypervisor")
	for _, want := range []string{"ch.small", "ch.large", "ch-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("instance-types --provider cloud-hypervisor lacks %q:\n%s", want, out)
		}
	}
	if code, _, errOut := n.run("", "node", "create-ch", "--shape", "ch.huge"); code == 0 || !strings.Contains(errOut, "INVALID_ARGUMENT") {
		t.Errorf("create-ch of an unknown shape: exit %d, %s", code, errOut)
	}
	if code, _, errOut := n.run("", "node", "create-ch", "--host", "ch-1"); code == 0 || !strings.Contains(errOut, "--shape") {
		t.Errorf("create-ch without --shape: exit %d, %s", code, errOut)
	}
}

// A host agent registers at run time the way a worker does: a one-shot
// token (AddHostAgent), then its registration, which the Manager answers
// with the host secret it calls the agent with. The token cannot be used
// twice; the agent keeps the secret across its restart; the provider runs
// the host once the overrides file names it, and a node runs there.
func TestCHHostAgentRegisters(t *testing.T) {
	t.Parallel()
	c := chCluster(t, testcluster.Options{})
	cl, x := c.Client(), ctx(t)
	tok, err := cl.AddHostAgent(x, "ch-reg")
	if err != nil || !strings.HasPrefix(tok.GetToken(), "nht_") {
		t.Fatalf("AddHostAgent = %v, %v", tok, err)
	}
	for _, name := range []string{"ch-reg", "ch-1"} {
		if _, err := cl.AddHostAgent(x, name); !codeIs(err, norsk.ErrAlreadyExists) {
			t.Errorf("AddHostAgent(%s) again: %v, want ALREADY_EXISTS", name, err)
		}
	}
	if _, err := cl.AddHostAgent(x, "Not A Host"); !codeIs(err, norsk.ErrInvalidArgument) {
		t.Errorf("a bad name: %v, want INVALID_ARGUMENT", err)
	}
	cfg := c.CH.Configs[0]
	cfg.Name, cfg.Dir, cfg.Token, cfg.Listen = "ch-reg", t.TempDir()+"/reg", "", "127.0.0.1:0"
	cfg.Register = &hostagent.Registration{ManagerURLs: []string{c.URL()}, Token: tok.GetToken()}
	a, err := hostagent.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	hs, err := cl.ListHostAgents(x)
	if err != nil || len(hs) != 1 || !hs[0].GetRegistered() || hs[0].GetUrl() != a.URL() {
		t.Fatalf("ListHostAgents = %v, %v", hs, err)
	}
	// The token is used up.
	again := cfg
	again.Dir = t.TempDir() + "/again"
	if b, err := hostagent.Start(again); err == nil || !strings.Contains(err.Error(), "already been used") {
		if b != nil {
			_ = b.Close()
		}
		t.Errorf("a second registration with the token: %v", err)
	}
	// The overrides file names the new host: the provider runs it.
	c.WriteOverridesFile("version: 1\n" + testcluster.CHOverrides(1) + "    ch-reg:\n      workerImages:\n        \"" + buildinfo.Version + "\": " + testcluster.CHImage + "\n")
	if _, err := cl.ReloadExternalConfig(x); err != nil {
		t.Fatal(err)
	}
	c.Eventually("the registered host's shapes loaded", func() bool {
		types, known, err := cl.ListInstanceTypes(x, norsk.InstanceTypeOptions{Provider: chProvider, Region: "ch-reg"})
		return err == nil && known && len(types) == len(testcluster.CHShapes)
	})
	// Restarted, it uses the secret it kept (no token needed).
	_ = a.Close()
	cfg.Register, cfg.Listen = nil, strings.TrimPrefix(a.URL(), "http://")
	if a, err = hostagent.Start(cfg); err != nil {
		t.Fatal(err)
	}
	n, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Host: "ch-reg", Shape: "ch.small"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState(n.GetNodeId(), norsk.NodeStateOnline)
	if err := cl.TerminateNode(x, n.GetNodeId()); err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState(n.GetNodeId(), norsk.NodeStateTerminated)
	if err := cl.RemoveHostAgent(x, "ch-reg"); err != nil {
		t.Fatal(err)
	}
	if err := cl.RemoveHostAgent(x, "ch-reg"); !codeIs(err, norsk.ErrNotFound) {
		t.Errorf("removing it again: %v, want NOT_FOUND", err)
	}
}

// The cloud-hypervisor provider moves with leadership: after the primary
// stops, the new primary keeps the microVM nodes (one VM each, none made
// again, none leaked) on a listed host and on a host registered at run
// time (its secret is in the replicated store), and terminates them.
func TestCHFailover(t *testing.T) {
	t.Parallel()
	c := chCluster(t, testcluster.Options{Members: 3})
	cl, x := c.Client(), ctx(t)
	tok, err := cl.AddHostAgent(x, "ch-reg")
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CH.Configs[0]
	cfg.Name, cfg.Dir, cfg.Token, cfg.Listen = "ch-reg", t.TempDir()+"/reg", "", "127.0.0.1:0"
	var urls []string
	for _, m := range c.Members {
		urls = append(urls, m.URL())
	}
	cfg.Register = &hostagent.Registration{ManagerURLs: urls, Token: tok.GetToken()}
	a, err := hostagent.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	c.WriteOverridesFile("version: 1\n" + testcluster.CHOverrides(1) + "    ch-reg:\n      workerImages:\n        \"" + buildinfo.Version + "\": " + testcluster.CHImage + "\n")
	if _, err := cl.ReloadExternalConfig(x); err != nil {
		t.Fatal(err)
	}
	c.Eventually("the registered host's shapes loaded", func() bool {
		_, known, err := cl.ListInstanceTypes(x, norsk.InstanceTypeOptions{Provider: chProvider, Region: "ch-reg"})
		return err == nil && known
	})
	var ids []string
	before := map[string]string{}
	for _, host := range []string{"ch-1", "ch-reg"} {
		n, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Host: host, Shape: "ch.small"})
		if err != nil {
			t.Fatal(err)
		}
		c.WaitNodeState(n.GetNodeId(), norsk.NodeStateOnline)
		ids = append(ids, n.GetNodeId())
		before[n.GetNodeId()] = n.GetInstanceId()
	}
	old := c.Primary()
	old.Stop()
	p := waitNewPrimary(t, c, others(c, old))
	pc := p.Client()
	c.Eventually("both microVM nodes online under the new primary "+p.Name, func() bool {
		for _, id := range ids {
			nodes, err := pc.ListNodes(x)
			if err != nil {
				return false
			}
			ok := false
			for _, n := range nodes {
				if n.GetNodeId() == id && n.GetState() == norsk.NodeStateOnline && n.GetConnected() && n.GetProviderInstance() == before[id] {
					ok = true
				}
			}
			if !ok {
				return false
			}
		}
		return true
	})
	if vms := hostVMs(t, c, 0); len(vms) != 1 {
		t.Errorf("ch-1 runs %d VMs after the failover; want 1", len(vms))
	}
	for _, id := range ids {
		if err := pc.TerminateNode(x, id); err != nil {
			t.Fatal(err)
		}
	}
	// Both agents launch their VMMs through the cluster's launcher: none
	// is left once the new primary has deleted the VMs.
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("last seen: %s", last)
		}
	}()
	c.Eventually("both VMs deleted by the new primary", func() bool {
		vms, running := hostVMs(t, c, 0), c.CH.VMMs.Running()
		last = fmt.Sprintf("%d VMs on ch-1, %d VMMs running", len(vms), running)
		if nodes, err := pc.ListNodes(x); err == nil {
			for _, n := range nodes {
				last += fmt.Sprintf("; node %s %s connected=%v instance=%s", n.GetNodeId(), n.GetState(), n.GetConnected(), n.GetProviderInstance())
			}
		}
		return len(vms) == 0 && running == 0
	})
}

// With TLS on, a host agent registering at run time gets its certificate
// from the cluster CA (the real Manager signs its CSR) and serves mutual
// TLS; the Manager's provider reaches it with its client certificate (its
// shapes load, a microVM node comes online and is terminated), and a
// client without the Manager's certificate is refused.
func TestCHHostAgentMutualTLS(t *testing.T) {
	t.Parallel()
	c := chCluster(t, testcluster.Options{TLS: "on"})
	cl, x := c.Client(), ctx(t)
	tok, err := cl.AddHostAgent(x, "ch-tls")
	if err != nil {
		t.Fatal(err)
	}
	// Bad input is refused, naming the field, and uses nothing up: the
	// agent registers with the same token below.
	pin, err := certpin.ClientConfig(certpin.Options{Fingerprint: c.Manager().CAFingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	mtr := &http.Transport{TLSClientConfig: pin, ForceAttemptHTTP2: true}
	defer mtr.CloseIdleConnections()
	mc := managerv1connect.NewManagerClient(&http.Client{Transport: mtr, Timeout: 10 * time.Second}, c.URL())
	csr := func() []byte {
		k, err := pki.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		der, err := pki.CreateCSR(k, "x")
		if err != nil {
			t.Fatal(err)
		}
		return der
	}()
	for _, bad := range []struct {
		url   string
		csr   []byte
		field string
	}{
		{"http://127.0.0.1:1", csr, "url"},
		{"https://127.0.0.1:1", []byte("not a CSR"), "csrDer"},
	} {
		req := connect.NewRequest(&managerv1.RegisterHostAgentRequest{Name: "ch-tls", Url: bad.url, CsrDer: bad.csr})
		req.Header().Set("Authorization", "Bearer "+tok.GetToken())
		if _, err := mc.RegisterHostAgent(x, req); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("RegisterHostAgent(%s, %d-byte CSR): %v, want INVALID_ARGUMENT naming %s", bad.url, len(bad.csr), err, bad.field)
		}
	}
	cfg := c.CH.Configs[0]
	cfg.Name, cfg.Dir, cfg.Token, cfg.Listen = "ch-tls", t.TempDir()+"/tls", "", "127.0.0.1:0"
	cfg.Register = &hostagent.Registration{ManagerURLs: []string{c.URL()}, Token: tok.GetToken(),
		TLS: certpin.Options{Fingerprint: c.Manager().CAFingerprint()}}
	a, err := hostagent.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	if !strings.HasPrefix(a.URL(), "https://") {
		t.Fatalf("the agent serves at %s, want https", a.URL())
	}
	hs, err := cl.ListHostAgents(x)
	if err != nil || len(hs) != 1 || hs[0].GetUrl() != a.URL() {
		t.Fatalf("ListHostAgents = %v, %v", hs, err)
	}
	// Without the Manager's client certificate: refused in the handshake.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.Manager().CACertPEM())
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	noCert := managerv1connect.NewHostAgentClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}, a.URL())
	secret, err := os.ReadFile(cfg.Dir + "/host-secret")
	if err != nil {
		t.Fatal(err)
	}
	req := connect.NewRequest(&managerv1.GetHostRequest{})
	req.Header().Set("Authorization", "Bearer "+strings.TrimSpace(string(secret)))
	// The agent renews its certificate with its host secret: the same URL
	// and a CSR; another URL, or a secret that is not the host's, is refused.
	for _, tc := range []struct {
		bearer, url string
		csr         []byte
		code        connect.Code
	}{
		{strings.TrimSpace(string(secret)), a.URL(), csr, 0},
		{strings.TrimSpace(string(secret)), "https://127.0.0.1:1", csr, connect.CodeInvalidArgument},
		{strings.TrimSpace(string(secret)), a.URL(), nil, connect.CodeInvalidArgument},
		{"nhs_not-the-secret", a.URL(), csr, connect.CodeUnauthenticated},
	} {
		req := connect.NewRequest(&managerv1.RegisterHostAgentRequest{Name: "ch-tls", Url: tc.url, CsrDer: tc.csr})
		req.Header().Set("Authorization", "Bearer "+tc.bearer)
		res, err := mc.RegisterHostAgent(x, req)
		if tc.code != 0 {
			if connect.CodeOf(err) != tc.code {
				t.Errorf("renewal (%s, %s, %d-byte CSR): %v, want %v", tc.bearer[:6], tc.url, len(tc.csr), err, tc.code)
			}
			continue
		}
		if err != nil {
			t.Fatalf("renewal: %v", err)
		}
		c, err := x509.ParseCertificate(res.Msg.GetCertificateDer())
		if err != nil || res.Msg.GetHostSecret() != tc.bearer {
			t.Fatalf("renewal answered %v, %v", c, err)
		}
		if name, ok := pki.HostAgentOf(c); !ok || name != "ch-tls" {
			t.Errorf("the renewed certificate names %q", name)
		}
	}
	// The host secret is right, but the handshake fails before any request.
	if _, err := noCert.GetHost(x, req); err == nil || connect.CodeOf(err) == connect.CodeUnauthenticated {
		t.Errorf("a client with the host secret but without the Manager's certificate: %v, want the connection refused", err)
	}
	c.WriteOverridesFile("version: 1\n" + testcluster.CHOverrides(1) + "    ch-tls:\n      workerImages:\n        \"" + buildinfo.Version + "\": " + testcluster.CHImage + "\n")
	if _, err := cl.ReloadExternalConfig(x); err != nil {
		t.Fatal(err)
	}
	c.Eventually("the TLS host's shapes loaded", func() bool {
		types, known, err := cl.ListInstanceTypes(x, norsk.InstanceTypeOptions{Provider: chProvider, Region: "ch-tls"})
		return err == nil && known && len(types) == len(testcluster.CHShapes)
	})
	n, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Host: "ch-tls", Shape: "ch.small"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState(n.GetNodeId(), norsk.NodeStateOnline)
	if err := cl.TerminateNode(x, n.GetNodeId()); err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState(n.GetNodeId(), norsk.NodeStateTerminated)
}
