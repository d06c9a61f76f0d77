// Package guestinit is the init (PID 1) of a worker microVM booted from an
// initramfs (internal/chqemu builds one): it mounts the kernel's file
// systems, loads the kernel modules the initramfs lists, brings up the
// network of QEMU's user-mode network (the guest 10.0.2.15/24, the host's
// loopback reached at 10.0.2.2), reads the worker's first-boot data from
// the disk whose serial is FirstBootSerial, and execs the worker
// (`norsk-ctl worker --user-data …`) on the process runtime.
//
// Manager URLs on the host's loopback (127.0.0.1, localhost, ::1) are
// rewritten to the user-mode network's host address, and the worker
// advertises the host address the VMM forwards to its port (the
// norsk.hostfwd kernel parameter), so the Manager on the host reaches it.
package guestinit

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/norsk-go/norsk-manager/internal/providers"
)

// FirstBootSerial is the serial of the first-boot disk (the host agent's
// VmConfig names it so).
const FirstBootSerial = "norsk-first-boot"

// HostAddr is the host's address on QEMU's user-mode network.
const HostAddr = "10.0.2.2"

// Config is what the init does; Main fills it from the kernel command
// line.
type Config struct {
	// Worker is the worker binary (default /bin/norsk-ctl).
	Worker string
	// Advertise is the address the worker registers for the Manager to
	// dial ("" = the worker's default).
	Advertise string
	// UserDataOut is where the rewritten first-boot data is written.
	UserDataOut string
}

// ParseCmdline reads the init's parameters from the kernel command line:
// norsk.hostfwd=<host:port>.
func ParseCmdline(cmdline string) Config {
	var c Config
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, "norsk.hostfwd="); ok {
			c.Advertise = v
		}
	}
	return c
}

// RewriteUserData points the user data's Manager URLs on the host's
// loopback at host (the address the guest reaches the host's loopback by).
func RewriteUserData(b []byte, host string) ([]byte, error) {
	ud, err := providers.DecodeUserData(b)
	if err != nil {
		return nil, err
	}
	for i, raw := range ud.ManagerURLs {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("managerUrls[%d]: %w", i, err)
		}
		h := u.Hostname()
		ip := net.ParseIP(h)
		if h == "localhost" || (ip != nil && ip.IsLoopback()) {
			if p := u.Port(); p != "" {
				u.Host = net.JoinHostPort(host, p)
			} else {
				u.Host = host
			}
			ud.ManagerURLs[i] = u.String()
		}
	}
	return ud.Encode(), nil
}

// FindDisk returns the /dev path of the block device whose serial
// (sysfs/block/<dev>/serial) is serial.
func FindDisk(sysfs, serial string) (string, error) {
	ents, err := os.ReadDir(filepath.Join(sysfs, "block"))
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(sysfs, "block", e.Name(), "serial"))
		if err != nil {
			continue
		}
		if string(bytes.TrimSpace(bytes.TrimRight(b, "\x00"))) == serial {
			return "/dev/" + e.Name(), nil
		}
	}
	return "", fmt.Errorf("no block device has serial %q", serial)
}

// ErrNotPID1 is Main's refusal to run as anything but a VM's init.
var ErrNotPID1 = errors.New("guest-init runs only as a microVM's init (PID 1)")
