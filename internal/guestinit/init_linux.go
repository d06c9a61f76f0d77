package guestinit

import (
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Main is the init: it returns only on failure (the caller reports it and
// powers the VM off).
func Main() error {
	if os.Getpid() != 1 {
		return ErrNotPID1
	}
	for _, m := range []struct{ src, dst, fstype string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/tmp", "tmpfs"}, {"tmpfs", "/run", "tmpfs"},
	} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fstype, 0, ""); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	if err := loadModules("/etc/norsk-modules"); err != nil {
		return err
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	cfg := ParseCmdline(string(cmdline))
	if cfg.Worker == "" {
		cfg.Worker = "/bin/norsk-ctl"
	}
	cfg.UserDataOut = "/run/user-data"
	if err := ifUp("lo", nil); err != nil {
		return err
	}
	if err := waitFor("eth0", 10*time.Second, func() bool { _, err := net.InterfaceByName("eth0"); return err == nil }); err != nil {
		return err
	}
	if err := ifUp("eth0", &net.IPNet{IP: net.IPv4(10, 0, 2, 15), Mask: net.CIDRMask(24, 32)}); err != nil {
		return err
	}
	var disk string
	if err := waitFor("the first-boot disk", 10*time.Second, func() bool {
		d, err := FindDisk("/sys", FirstBootSerial)
		disk = d
		return err == nil
	}); err != nil {
		return err
	}
	raw, err := os.ReadFile(disk)
	if err != nil {
		return fmt.Errorf("read the first-boot disk %s: %w", disk, err)
	}
	ud, err := RewriteUserData(raw, HostAddr)
	if err != nil {
		return fmt.Errorf("the first-boot disk %s: %w", disk, err)
	}
	if err := os.WriteFile(cfg.UserDataOut, ud, 0o600); err != nil {
		return err
	}
	args := []string{cfg.Worker, "worker", "--user-data", cfg.UserDataOut, "--runtime", "process", "--data-dir", "/var/lib/norsk-worker"}
	if cfg.Advertise != "" {
		args = append(args, "--advertise", cfg.Advertise)
	}
	fmt.Fprintf(os.Stderr, "guest-init: exec %s\n", strings.Join(args, " "))
	env := append(os.Environ(), "HOME=/root", "PATH=/bin")
	return syscall.Exec(cfg.Worker, args, env)
}

// PowerOff ends the VM (init must never exit).
func PowerOff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

func waitFor(what string, d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// loadModules loads each module the list names, in order.
func loadModules(list string) error {
	b, err := os.ReadFile(list)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, p := range strings.Fields(string(b)) {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("module %s: %w", p, err)
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		_ = f.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("load module %s: %w", p, err)
		}
	}
	return nil
}

// ifUp gives the interface addr (when not nil) and brings it up.
func ifUp(name string, addr *net.IPNet) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if addr != nil {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(addr.IP.To4()); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFADDR, ifr); err != nil {
			return fmt.Errorf("%s: set address: %w", name, err)
		}
		ifr, _ = unix.NewIfreq(name)
		if err := ifr.SetInet4Addr(net.IP(addr.Mask).To4()); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFNETMASK, ifr); err != nil {
			return fmt.Errorf("%s: set netmask: %w", name, err)
		}
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s: flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s: up: %w", name, err)
	}
	return nil
}
