// Package hostinfo is what a worker reports of its machine: the hardware
// (vCPUs, memory, architecture, hostname, at registration and in the
// hello) and the load (CPU use between two samples, memory in use, in
// every heartbeat), read from /proc.
package hostinfo

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Hardware is what the worker reports of its machine, with gpus as
// configured.
func Hardware(gpus []*managerv1.Gpu) *managerv1.Hardware {
	hw := &managerv1.Hardware{
		Vcpus:        uint32(goruntime.NumCPU()),
		Gpus:         gpus,
		Architecture: architecture(goruntime.GOARCH),
	}
	if total, _, err := Memory(); err == nil {
		hw.MemoryBytes = total
	}
	if h, err := os.Hostname(); err == nil {
		hw.Hostname = h
	}
	return hw
}

func architecture(goarch string) managerv1.Architecture {
	switch goarch {
	case "amd64":
		return managerv1.Architecture_ARCHITECTURE_X86_64
	case "arm64":
		return managerv1.Architecture_ARCHITECTURE_AARCH_64
	}
	return managerv1.Architecture_ARCHITECTURE_UNSPECIFIED
}

// Memory returns MemTotal and MemAvailable from /proc/meminfo, in bytes.
func Memory() (total, available uint64, err error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	return parseMeminfo(b)
}

func parseMeminfo(b []byte) (total, available uint64, err error) {
	var haveTotal, haveAvail bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, perr := strconv.ParseUint(f[1], 10, 64)
		if perr != nil {
			continue
		}
		if len(f) >= 3 && f[2] == "kB" {
			v *= 1024
		}
		switch f[0] {
		case "MemTotal:":
			total, haveTotal = v, true
		case "MemAvailable:":
			available, haveAvail = v, true
		}
	}
	if !haveTotal {
		return 0, 0, errors.New("/proc/meminfo: no MemTotal")
	}
	if !haveAvail {
		available = total
	}
	return total, available, nil
}

// CPU measures CPU use from /proc/stat between two samples.
type CPU struct {
	mu          sync.Mutex
	idle, total uint64
}

// Sample returns the CPU use in percent since the previous sample (since
// boot for the first).
func (s *CPU) Sample() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	idle, total, ok := parseProcStatCPU(b)
	if !ok {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	di, dt := idle-s.idle, total-s.total
	s.idle, s.total = idle, total
	if dt == 0 || di > dt {
		return 0
	}
	return 100 * float64(dt-di) / float64(dt)
}

// parseProcStatCPU reads the aggregate "cpu" line: idle (idle + iowait) and
// total jiffies.
func parseProcStatCPU(b []byte) (idle, total uint64, ok bool) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		// guest and guest_nice (fields 9 and 10) are already in user/nice.
		if i >= 8 {
			break
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return idle, total, true
}
