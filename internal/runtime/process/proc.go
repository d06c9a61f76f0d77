package process

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// procStat is what the runtime reads of /proc/<pid>/stat.
type procStat struct {
	state      byte   // field 3: R, S, D, Z, X, …
	startTicks uint64 // field 22: start time in clock ticks after boot
}

// readProcStat reads /proc/<pid>/stat. The command name (field 2) is in
// parentheses and may hold spaces and parentheses, so fields are counted
// from the last ')'.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("proc stat: no command field")
	}
	fields := bytes.Fields(b[i+1:])
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 || len(fields[0]) != 1 {
		return procStat{}, fmt.Errorf("proc stat: %d fields after the command", len(fields))
	}
	ticks, err := strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat: start time: %w", err)
	}
	return procStat{state: fields[0][0], startTicks: ticks}, nil
}

// alive reports whether the process pid that started at startTicks still
// runs. A zombie (exited, not yet reaped) does not run; a process that
// reuses the pid has another start time.
func alive(pid int, startTicks uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := readProcStat(pid)
	if err != nil {
		return false
	}
	return st.startTicks == startTicks && st.state != 'Z' && st.state != 'X' && st.state != 'x'
}

// signalService sends sig to the process group of the service process p
// (services run in a session of their own, so their group id is their pid),
// or to the process alone if it left its group. A process that no longer
// runs is not signalled: its pid may belong to another process by now.
func signalService(p *processState, sig syscall.Signal) error {
	if !alive(p.PID, p.StartTicks) {
		return nil
	}
	err := syscall.Kill(-p.PID, sig)
	if errors.Is(err, syscall.ESRCH) {
		err = syscall.Kill(p.PID, sig)
	}
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// killLeftovers SIGKILLs what remains of the process group of a service
// whose process was just seen to exit. Only then: while members remain the
// kernel does not hand the group id out again as a pid, but once the group
// is empty a new process may lead a group of that id.
func killLeftovers(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// exitCode is the shell's view of how a process ended: its exit status, or
// 128+signal when a signal killed it; -1 when unknown.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
	return ps.ExitCode()
}

// resolveExecutable finds command[0] the way exec would at start: a name
// with a slash is a path (relative to workDir), any other is looked up in
// the worker's PATH. It returns an absolute path.
func resolveExecutable(name, workDir string) (string, error) {
	if !bytes.ContainsRune([]byte(name), '/') {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", err
		}
		return absFrom(p, workDir), nil
	}
	p := absFrom(name, workDir)
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", p)
	}
	return p, nil
}
