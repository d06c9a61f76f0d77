package chqemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/chapi"
	"github.com/norsk-go/norsk-manager/internal/providers"
)

func TestInitramfsIsNewcCpio(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	init := filepath.Join(dir, "init")
	if err := os.WriteFile(init, []byte("#!init"), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := BuildInitramfs(&buf, Initramfs{Init: init, Files: []InitramfsFile{{Path: "/bin/x", Data: []byte("xyz"), Mode: 0o755}}}); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if !bytes.HasPrefix(b, []byte("070701")) || len(b)%4 != 0 {
		t.Fatalf("not a newc archive: %q…, %d bytes", b[:6], len(b))
	}
	// Walk the entries: names, sizes and alignment as the kernel reads them.
	var names []string
	for off := 0; ; {
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			t.Fatalf("entry at %d: magic %q", off, h[:6])
		}
		var size, nameSize int
		if _, err := fmtSscanHex(h[54:62], &size); err != nil {
			t.Fatal(err)
		}
		if _, err := fmtSscanHex(h[94:102], &nameSize); err != nil {
			t.Fatal(err)
		}
		name := string(b[off+110 : off+110+nameSize-1])
		if name == "TRAILER!!!" {
			break
		}
		names = append(names, name)
		off = align4(off+110+nameSize) + size
		off = align4(off)
	}
	for _, want := range []string{"bin", "dev", "dev/console", "init", "bin/x", "etc/norsk-modules", "proc"} {
		if !slices.Contains(names, want) {
			t.Errorf("the archive lacks %s: %v", want, names)
		}
	}
	if err := BuildInitramfs(&buf, Initramfs{}); err == nil {
		t.Error("an initramfs without an init was built")
	}
}

func align4(n int) int { return (n + 3) &^ 3 }

func TestModulesFor(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "6.1.0-1-amd64")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dep := "kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n" +
		"kernel/drivers/virtio/virtio.ko:\nkernel/drivers/virtio/virtio_ring.ko:\n" +
		"kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n" +
		"kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko\nkernel/net/core/failover.ko:\n"
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/drivers/block/virtio_blk.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ModulesFor(root, "6.1.0-1-amd64", "virtio_mmio", "virtio_blk", "virtio-net")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, modName(p))
	}
	// Every module after the modules it depends on, each once; a builtin
	// one is not loaded.
	want := "virtio,virtio_ring,virtio_mmio,failover,net_failover,virtio_net"
	if strings.Join(names, ",") != want {
		t.Errorf("load order %v, want %s", names, want)
	}
	if _, err := ModulesFor(root, "6.1.0-1-amd64", "nope"); err == nil {
		t.Error("an unknown module resolved")
	}
	if rel, err := KernelRelease("/boot/vmlinuz-6.1.0-1-amd64"); err != nil || rel != "6.1.0-1-amd64" {
		t.Errorf("KernelRelease = %q, %v", rel, err)
	}
}

func TestArgs(t *testing.T) {
	t.Parallel()
	cfg := chapi.VmConfig{Payload: &chapi.PayloadConfig{Kernel: "/k", Initramfs: "/i", Cmdline: "console=ttyS0 -- x"},
		Cpus: &chapi.CpusConfig{BootVcpus: 2, MaxVcpus: 2}, Memory: &chapi.MemoryConfig{Size: 1 << 30},
		Disks:  []chapi.DiskConfig{{Path: "/r,oot"}, {Path: "/b", Readonly: true, Serial: "norsk-first-boot"}},
		Serial: &chapi.ConsoleConfig{Mode: "File", File: "/s.log"}}
	got := strings.Join(Args(cfg, "/q.sock", 4242, AccelKVM, 2596100), " ")
	for _, want := range []string{"-M microvm", "-enable-kvm", "-smp 2", "-m 1024M", "-kernel /k", "-initrd /i",
		"file=/r,,oot", "readonly=on", "serial=norsk-first-boot", "hostfwd=tcp:127.0.0.1:4242-:6791",
		"-append console=ttyS0 norsk.hostfwd=127.0.0.1:4242 -- x", "-serial file:/s.log", "-qmp unix:/q.sock,server=on,wait=off"} {
		if !strings.Contains(got, want) {
			t.Errorf("args lack %q:\n%s", want, got)
		}
	}
	cfg.Net = []chapi.NetConfig{{Tap: "nt1", Mac: "52:54:00:00:00:01"}}
	got = strings.Join(Args(cfg, "/q.sock", 0, AccelTCG, 2596100), " ")
	if !strings.Contains(got, "tsc_early_khz=2596100") || strings.Contains(got, "hostfwd") || strings.Contains(got, "norsk.hostfwd") || !strings.Contains(got, "tap,id=net0,ifname=nt1") || strings.Contains(got, "-enable-kvm") {
		t.Errorf("a tap VM without KVM: %s", got)
	}
}

func TestParseCPUMHz(t *testing.T) {
	t.Parallel()
	if got := parseCPUMHz("processor\t: 0\ncpu MHz\t\t: 2596.100\ncpu MHz\t\t: 1.0\n"); got != 2596100 {
		t.Errorf("parseCPUMHz = %d", got)
	}
	if got := parseCPUMHz("processor\t: 0\n"); got != 0 {
		t.Errorf("no cpu MHz: %d", got)
	}
}

func TestStateOf(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]chapi.VmState{"running": chapi.VmRunning, "paused": chapi.VmPaused, "prelaunch": chapi.VmCreated,
		"shutdown": chapi.VmShutdown, "guest-panicked": chapi.VmShutdown} {
		if got := stateOf(qmpStatus{Status: in}); got != want {
			t.Errorf("%s = %s, want %s", in, got, want)
		}
	}
}

// A real microVM: QEMU's microvm machine under KVM boots Debian's kernel
// and the test initramfs through the API; vm.info answers QEMU's state;
// the guest's init finds the first-boot disk by its serial and execs the
// worker (which finds no Manager here); vm.shutdown ends QEMU.
func TestBootMicroVM(t *testing.T) {
	dir, err := os.MkdirTemp("", "chq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	g := BuildTestGuest(t, dir)
	v, err := Start(Options{APISocket: filepath.Join(dir, "api.sock"), Accel: g.Accel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	c := chapi.NewClient(filepath.Join(dir, "api.sock"))
	ctx := t.Context()
	if p, err := c.Ping(ctx); err != nil || p.Version != Version || !strings.Contains(p.BuildVersion, "QEMU") {
		t.Fatalf("ping = %+v, %v", p, err)
	}
	root, boot, serial := filepath.Join(dir, "root.img"), filepath.Join(dir, "boot.img"), filepath.Join(dir, "serial.log")
	ud := providers.UserData{NodeID: "n1", ManagerURLs: []string{"http://127.0.0.1:1"}, Token: "nrt_x"}.Encode()
	if err := os.WriteFile(root, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(boot, append(ud, make([]byte, 512-len(ud)%512)...), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := chapi.VmConfig{Payload: &chapi.PayloadConfig{Kernel: g.Kernel, Initramfs: g.Initramfs, Cmdline: "console=ttyS0 panic=-1"},
		Cpus: &chapi.CpusConfig{BootVcpus: 1, MaxVcpus: 1}, Memory: &chapi.MemoryConfig{Size: 512 << 20},
		Disks:  []chapi.DiskConfig{{Path: root, ID: "root"}, {Path: boot, ID: "first-boot", Readonly: true, Serial: "norsk-first-boot"}},
		Serial: &chapi.ConsoleConfig{Mode: "File", File: serial}}
	if err := c.CreateVM(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	booted := time.Now()
	if err := c.BootVM(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil || info.State != chapi.VmRunning {
		t.Fatalf("info = %+v, %v", info, err)
	}
	if b, _ := json.Marshal(info.Config); !bytes.Contains(b, []byte("norsk-first-boot")) {
		t.Errorf("info's config: %s", b)
	}
	// The guest's init reaches the worker's exec.
	want := "guest-init: exec /bin/norsk-ctl worker --user-data /run/user-data"
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, _ := os.ReadFile(serial)
		if bytes.Contains(b, []byte(want)) {
			t.Logf("vm.boot → the worker's exec (%s): %s", g.Accel, time.Since(booted).Round(100*time.Millisecond)) // a figure, not asserted
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest did not exec its worker; serial port:\n%s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.ShutdownVM(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx); err != nil || info.State != chapi.VmShutdown {
		t.Errorf("after vm.shutdown: %+v, %v", info, err)
	}
	if err := c.DeleteVM(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(ctx); !chapi.IsNotFound(err) {
		t.Errorf("info after delete: %v", err)
	}
	if err := c.ShutdownVMM(ctx); err != nil && !errors.Is(err, chapi.ErrUnreachable) {
		t.Fatal(err)
	}
}
