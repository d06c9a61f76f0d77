package tests

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/chapi"
	"github.com/norsk-go/norsk-manager/internal/chqemu"
	"github.com/norsk-go/norsk-manager/internal/hostagent"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// The smoke test of a real microVM behind the VMM interface: the host
// agent creates the VM through Cloud Hypervisor's REST API, served by
// `norsk-ctl ch-vmm --backend qemu`, which boots QEMU's microvm machine
// with Debian's kernel and an initramfs built here; the guest's worker
// registers with the Manager over the user-mode network and the node goes
// online; terminating it shuts the VM down (QEMU ends). Skipped where
// qemu-system-x86_64, /dev/kvm or a kernel in /boot is missing (CI
// installs no QEMU); on a host whose KVM is PVM the VM is emulated (TCG).
func TestCHQEMUMicroVM(t *testing.T) {
	dir, err := os.MkdirTemp("", "chq") // short: it holds no socket, but keeps paths readable
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	g := chqemu.BuildTestGuest(t, dir)
	c := chCluster(t, testcluster.Options{CHHosts: 1,
		CHVMM:    hostagent.Exec{Path: g.NorskCtl, Args: []string{"ch-vmm", "--backend", "qemu", "--accel", g.Accel}},
		CHKernel: g.Kernel, CHInitramfs: g.Initramfs, CHCmdline: "console=ttyS0 panic=-1"})
	cl, x := c.Client(), ctx(t)
	created := time.Now()
	n, err := cl.CreateCloudHypervisorNode(x, norsk.CloudHypervisorNode{Host: testcluster.CHHostName(0), Shape: "ch.small", Pool: testcluster.CHPool})
	if err != nil {
		t.Fatal(err)
	}
	vms := hostVMs(t, c, 0)
	if len(vms) != 1 || vms[0].GetState() != "Running" {
		t.Fatalf("VMs %v", vms)
	}
	vmDir := filepath.Dir(vms[0].GetApiSocket())
	t.Cleanup(func() { // before the cluster's end deletes the VM
		if t.Failed() {
			for _, f := range []string{"serial.log", "vmm.log", "qemu.log"} {
				b, _ := os.ReadFile(filepath.Join(vmDir, f))
				t.Logf("%s:\n%s", f, b)
			}
		}
	})
	vmm := chapi.NewClient(vms[0].GetApiSocket())
	if p, err := vmm.Ping(x); err != nil || p.Version != chqemu.Version {
		t.Fatalf("the VM's VMM: %+v, %v; want the qemu backend", p, err)
	}
	info, err := vmm.Info(x)
	if err != nil || info.State != chapi.VmRunning || info.Config.Payload.Initramfs != g.Initramfs || info.Config.Cpus.BootVcpus != 2 {
		t.Fatalf("vm.info = %+v, %v", info, err)
	}
	// The kernel boots first (emulated, on a busy machine, tens of
	// seconds): wait up to the start timeout, not WaitTimeout.
	var node *norsk.Node
	for deadline := time.Now().Add(testcluster.RealVMStart); ; time.Sleep(200 * time.Millisecond) {
		node = c.Node(n.GetNodeId())
		if node != nil && node.GetState() == norsk.NodeStateOnline {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %v not online after %s", node, testcluster.RealVMStart)
		}
	}
	t.Logf("create → online (%s): %s", g.Accel, time.Since(created).Round(100*time.Millisecond)) // a figure, not asserted
	if node.GetProvider() != chProvider || node.GetProviderInstance() != n.GetInstanceId() || node.GetHardware().GetVcpus() != 2 {
		t.Fatalf("node %v", node)
	}
	if err := cl.TerminateNode(x, n.GetNodeId()); err != nil {
		t.Fatal(err)
	}
	c.WaitNodeState(n.GetNodeId(), norsk.NodeStateTerminated)
	c.Eventually("the VM deleted and its VMM ended", func() bool {
		_, err := vmm.Ping(x)
		return len(hostVMs(t, c, 0)) == 0 && errors.Is(err, chapi.ErrUnreachable)
	})
}
