package chqemu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Usable reports why this machine cannot boot a microVM with this backend
// (nil when it can): QEMU's x86-64 emulator on PATH, /dev/kvm that opens
// read-write, and a Debian kernel in /boot. kernel is the newest
// /boot/vmlinuz-*.
//
// accel is the accelerator a distribution kernel boots under here:
// AccelKVM, or AccelTCG when the host's KVM is PVM (kvm_pvm: the
// pagetable-based nested virtualization of a host that is itself a VM
// without hardware virtualization), which boots only kernels built as PVM
// guests — Debian's is not (it hangs after decompression), so the VM is
// emulated; why says so.
func Usable() (kernel, accel, why string, err error) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return "", "", "", errors.New("no qemu-system-x86_64 on PATH (Debian: apt-get install qemu-system-x86)")
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return "", "", "", fmt.Errorf("/dev/kvm is not usable: %w", err)
	}
	_ = f.Close()
	accel = AccelKVM
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		accel = AccelTCG
		why = "this host's KVM is PVM (kvm_pvm), which boots only PVM guest kernels, and Debian's kernel is not one: the microVM runs under TCG"
	}
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(ks) == 0 {
		return "", "", "", errors.New("no kernel in /boot (Debian: apt-get install linux-image-amd64)")
	}
	sort.Strings(ks)
	kernel = ks[len(ks)-1]
	kf, err := os.Open(kernel)
	if err != nil {
		return "", "", "", fmt.Errorf("kernel %s: %w", kernel, err)
	}
	_ = kf.Close()
	return kernel, accel, why, nil
}

// TestGuest is what a test boots a worker microVM from.
type TestGuest struct {
	Kernel, Initramfs string
	// Accel is the accelerator to boot it under (Usable).
	Accel string
	// NorskCtl is the static norsk-ctl binary built for the guest (it runs
	// on the host too: the VMM's program form is its ch-vmm --backend
	// qemu).
	NorskCtl string
}

// BuildTestGuest skips t when Usable says so; else it builds, into dir,
// static norsk-ctl and norsk-guest-init binaries from this module (go
// build, CGO off) and the initramfs holding them and the kernel's virtio
// modules.
func BuildTestGuest(t testing.TB, dir string) TestGuest {
	t.Helper()
	kernel, accel, why, err := Usable()
	if err != nil {
		t.Skipf("no real microVM here: %v", err)
	}
	if why != "" {
		t.Log(why)
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	g := TestGuest{Kernel: kernel, Accel: accel, NorskCtl: filepath.Join(dir, "norsk-ctl"), Initramfs: filepath.Join(dir, "initramfs.cpio")}
	init := filepath.Join(dir, "norsk-guest-init")
	for bin, pkg := range map[string]string{g.NorskCtl: "./cmd/norsk-ctl", init: "./cmd/norsk-guest-init"} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	rel, err := KernelRelease(kernel)
	if err != nil {
		t.Fatal(err)
	}
	mods, err := ModulesFor("/lib/modules", rel, GuestModules...)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteInitramfs(g.Initramfs, Initramfs{Init: init, Modules: mods,
		Files: []InitramfsFile{{Path: "/bin/norsk-ctl", Source: g.NorskCtl, Mode: 0o755}}}); err != nil {
		t.Fatal(err)
	}
	return g
}
