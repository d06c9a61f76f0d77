package chqemu

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/chapi"
)

// The API's answers that need no guest, with an "emulator" that exits at
// once (true): 404 before vm.create, 400 for a config this backend cannot
// boot, 500 with QEMU's end when it does not start; an unknown
// accelerator is refused. Runs everywhere (no QEMU needed).
func TestAPIRefusals(t *testing.T) {
	t.Parallel()
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) on PATH")
	}
	dir, err := os.MkdirTemp("", "chq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "api.sock")
	if _, err := Start(Options{APISocket: sock, QEMU: truePath, Accel: "hvf"}); err == nil || !strings.Contains(err.Error(), "accelerator") {
		t.Errorf("accelerator hvf: %v", err)
	}
	v, err := Start(Options{APISocket: sock, QEMU: truePath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	c, ctx := chapi.NewClient(sock), t.Context()
	kernel, disk := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "disk.img")
	for _, f := range []string{kernel, disk} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	status := func(err error) int {
		var e *chapi.Error
		if errors.As(err, &e) {
			return e.Status
		}
		return 0
	}
	for _, tc := range []struct {
		name string
		call func() error
		want int
	}{
		{"info before create", func() error { _, err := c.Info(ctx); return err }, 404},
		{"boot before create", func() error { return c.BootVM(ctx) }, 404},
		{"no payload", func() error { return c.CreateVM(ctx, chapi.VmConfig{}) }, 400},
		{"firmware", func() error {
			return c.CreateVM(ctx, chapi.VmConfig{Payload: &chapi.PayloadConfig{Firmware: kernel}})
		}, 400},
		{"a VFIO device", func() error {
			return c.CreateVM(ctx, chapi.VmConfig{Payload: &chapi.PayloadConfig{Kernel: kernel}, Devices: []chapi.DeviceConfig{{Path: "/sys/bus/pci/devices/0"}}})
		}, 400},
		{"duplicate disk", func() error {
			return c.CreateVM(ctx, chapi.VmConfig{Payload: &chapi.PayloadConfig{Kernel: kernel}, Disks: []chapi.DiskConfig{{Path: disk}, {Path: disk}}})
		}, 409},
	} {
		if err := tc.call(); status(err) != tc.want {
			t.Errorf("%s: %v, want %d", tc.name, err, tc.want)
		}
	}
	if err := c.CreateVM(ctx, chapi.VmConfig{Payload: &chapi.PayloadConfig{Kernel: kernel}, Disks: []chapi.DiskConfig{{Path: disk}}}); err != nil {
		t.Fatal(err)
	}
	err = c.BootVM(ctx)
	var e *chapi.Error
	if !errors.As(err, &e) || e.Status != 500 || !strings.Contains(strings.Join(e.Messages, " "), "QEMU exited") {
		t.Errorf("boot with an emulator that exits: %v, want 500 saying QEMU exited", err)
	}
	if info, err := c.Info(ctx); err != nil || info.State != chapi.VmCreated || info.Config.Memory.Size != 512<<20 {
		t.Errorf("info after a failed boot: %+v, %v; want Created with the default memory", info, err)
	}
	if err := c.ShutdownVM(ctx); status(err) != 500 {
		t.Errorf("shutdown of a VM not booted: %v, want 500", err)
	}
	if err := c.DeleteVM(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(ctx); status(err) != 404 {
		t.Errorf("info after delete: %v, want 404", err)
	}
}
