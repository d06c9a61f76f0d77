// Package chapi is Cloud Hypervisor's REST API as its clients see it: the
// wire types of its OpenAPI description (vmm/src/api/openapi/
// cloud-hypervisor.yaml; only the fields this repository reads or writes)
// and a Client that speaks it over a VMM's Unix API socket
// (`cloud-hypervisor --api-socket path=…`). The host agent drives every VM
// through it; the local VMM (internal/chsim) serves the same types.
package chapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// VmmPingResponse is GET /vmm.ping's answer.
type VmmPingResponse struct {
	BuildVersion string   `json:"build_version,omitempty"`
	Version      string   `json:"version"`
	PID          int64    `json:"pid,omitempty"`
	Features     []string `json:"features,omitempty"`
}

// VmState is a VM's state (VmState).
type VmState string

// VmState values.
const (
	VmCreated  VmState = "Created"
	VmRunning  VmState = "Running"
	VmShutdown VmState = "Shutdown"
	VmPaused   VmState = "Paused"
)

// PayloadConfig is what the VM boots: a kernel (with cmdline and
// initramfs) or firmware.
type PayloadConfig struct {
	Firmware  string `json:"firmware,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
	Cmdline   string `json:"cmdline,omitempty"`
	Initramfs string `json:"initramfs,omitempty"`
}

// CpusConfig sizes the VM's vCPUs.
type CpusConfig struct {
	BootVcpus int `json:"boot_vcpus"`
	MaxVcpus  int `json:"max_vcpus"`
}

// MemoryConfig sizes the VM's memory (bytes).
type MemoryConfig struct {
	Size   int64 `json:"size"`
	Shared bool  `json:"shared,omitempty"`
}

// DiskConfig is one disk.
type DiskConfig struct {
	Path     string `json:"path,omitempty"`
	Readonly bool   `json:"readonly,omitempty"`
	ID       string `json:"id,omitempty"`
	Serial   string `json:"serial,omitempty"`
}

// NetConfig is one network interface on a tap device.
type NetConfig struct {
	Tap  string `json:"tap,omitempty"`
	IP   string `json:"ip,omitempty"`
	Mask string `json:"mask,omitempty"`
	Mac  string `json:"mac,omitempty"`
	ID   string `json:"id,omitempty"`
}

// DeviceConfig is a VFIO device passed through (a GPU).
type DeviceConfig struct {
	Path string `json:"path"`
	ID   string `json:"id,omitempty"`
}

// ConsoleConfig is the serial port's or console's mode.
type ConsoleConfig struct {
	File string `json:"file,omitempty"`
	Mode string `json:"mode"`
}

// VmConfig is PUT /vm.create's body. payload is required.
type VmConfig struct {
	Cpus    *CpusConfig    `json:"cpus,omitempty"`
	Memory  *MemoryConfig  `json:"memory,omitempty"`
	Payload *PayloadConfig `json:"payload"`
	Disks   []DiskConfig   `json:"disks,omitempty"`
	Net     []NetConfig    `json:"net,omitempty"`
	Devices []DeviceConfig `json:"devices,omitempty"`
	Serial  *ConsoleConfig `json:"serial,omitempty"`
	Console *ConsoleConfig `json:"console,omitempty"`
}

// VmInfo is GET /vm.info's answer.
type VmInfo struct {
	Config           VmConfig `json:"config"`
	State            VmState  `json:"state"`
	MemoryActualSize int64    `json:"memory_actual_size,omitempty"`
}

// Validate checks a VmConfig as the VMM's config validation does: a
// payload (a kernel or firmware that exists), vCPUs and memory sizes that
// make sense, disks that exist, unique device ids.
func (c *VmConfig) Validate() error {
	if c.Payload == nil || (c.Payload.Kernel == "" && c.Payload.Firmware == "") {
		return errors.New("Error validating configuration: No kernel or firmware provided")
	}
	for _, p := range []string{c.Payload.Kernel, c.Payload.Firmware, c.Payload.Initramfs} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("Error validating configuration: Cannot open payload %s: %v", p, err)
		}
	}
	if c.Cpus != nil {
		if c.Cpus.BootVcpus < 1 {
			return errors.New("Error validating configuration: Boot vCPUs must be at least 1")
		}
		if c.Cpus.MaxVcpus < c.Cpus.BootVcpus {
			return errors.New("Error validating configuration: Max vCPUs lower than boot vCPUs")
		}
	}
	if c.Memory != nil && c.Memory.Size < 1<<20 {
		return errors.New("Error validating configuration: Memory size is too small")
	}
	ids := map[string]bool{}
	paths := map[string]bool{}
	for _, d := range c.Disks {
		if d.Path == "" {
			return errors.New("Error validating configuration: Disk without a path")
		}
		if paths[d.Path] {
			return &ConflictError{fmt.Sprintf("Error validating configuration: Duplicated device path: %s", d.Path)}
		}
		paths[d.Path] = true
		if d.ID != "" {
			if ids[d.ID] {
				return &ConflictError{fmt.Sprintf("Error validating configuration: Identifier %s is not unique", d.ID)}
			}
			ids[d.ID] = true
		}
		if _, err := os.Stat(d.Path); err != nil {
			return fmt.Errorf("Error validating configuration: Cannot open disk path %s: %v", d.Path, err)
		}
	}
	return nil
}

// ConflictError is a validation error the VMM answers 409 for.
type ConflictError struct{ msg string }

func (e *ConflictError) Error() string { return e.msg }

// FirstBootData reads the worker's first-boot data from a raw first-boot
// disk: the bytes up to the first NUL (the disk is padded to whole
// sectors with NULs), as the worker image's first boot reads /dev/vdb.
func FirstBootData(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return b
}

// ErrorBody is the body of an error answer: the error's chain of messages,
// outermost first (a JSON array of strings).
func ErrorBody(msgs ...string) []byte {
	b, _ := json.Marshal(msgs) // strings only: cannot fail
	return b
}

// ParseAPISocketFlag reads cloud-hypervisor's --api-socket value:
// "path=<socket>" (or a bare path, as older releases took).
func ParseAPISocketFlag(v string) (string, error) {
	for _, kv := range strings.Split(v, ",") {
		if p, ok := strings.CutPrefix(kv, "path="); ok && p != "" {
			return p, nil
		}
	}
	if v != "" && !strings.Contains(v, "=") {
		return v, nil
	}
	return "", fmt.Errorf("--api-socket %q: want path=<socket>", v)
}
