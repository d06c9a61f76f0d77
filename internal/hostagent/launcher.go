package hostagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// Launcher starts VMM processes. Launch starts one that serves its API on
// apiSocket and returns once it is started (the agent waits for the socket
// to answer); the process must outlive the agent (a session of its own),
// since a VM runs as long as its VMM does. The agent ends a VMM only
// through its API (vmm.shutdown).
type Launcher interface {
	Launch(ctx context.Context, vmID, apiSocket string) error
}

// Exec launches a VMM binary: Path with Args and
// "--api-socket path=<socket>" appended, as cloud-hypervisor takes it, in
// a session of its own, its output in vmm.log beside the socket.
type Exec struct {
	Path string
	Args []string
}

// Launch starts the process.
func (e Exec) Launch(_ context.Context, vmID, apiSocket string) error {
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(apiSocket), "vmm.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append(append([]string(nil), e.Args...), "--api-socket", "path="+apiSocket)
	cmd := exec.Command(e.Path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the VMM of %s (%s): %w", vmID, e.Path, err)
	}
	// Reap it when it exits while this agent runs; after a restart the
	// new agent is not its parent and init reaps it.
	go func() { _ = cmd.Wait() }()
	return nil
}
