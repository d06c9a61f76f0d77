package tests

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/runtime/process"
	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	workerpkg "github.com/norsk-go/norsk-manager/internal/worker"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// progJob is a job whose one service is the test program (process runtime).
func progJob(t testing.TB, id string, b runtimetest.Behaviour, tags map[string]string) *norsk.Job {
	return &norsk.Job{
		JobId: id,
		Tags:  tags,
		Services: []*norsk.Service{{
			Name:    "main",
			Command: append([]string{testcluster.TestProg(t)}, b.Args()...),
			Ports:   portsFor(b),
		}},
	}
}

func portsFor(b runtimetest.Behaviour) []*norsk.PortMapping {
	if b.Listen == 0 {
		return nil
	}
	return []*norsk.PortMapping{{ContainerPort: b.Listen, Protocol: norsk.ProtocolTCP}}
}

func ctx(t testing.TB) context.Context { return testcluster.Context(t) }

// historyKinds lists the history events, newest first, as short names.
func historyKinds(jh *norsk.JobWithHistory) []string {
	var out []string
	for _, e := range jh.GetHistory() {
		switch {
		case e.GetCreated() != nil:
			out = append(out, "created")
		case e.GetUpdated() != nil:
			out = append(out, "updated")
		case e.GetProvisioned() != nil:
			out = append(out, "provisioned")
		case e.GetPrepared() != nil:
			out = append(out, "prepared")
		case e.GetRunning() != nil:
			out = append(out, "running")
		case e.GetStopping() != nil:
			out = append(out, "stopping")
		case e.GetStopped() != nil:
			out = append(out, "stopped")
		case e.GetCompleted() != nil:
			out = append(out, "completed")
		case e.GetRejected() != nil:
			out = append(out, "rejected")
		case e.GetNotice() != nil:
			out = append(out, "notice")
		}
	}
	return out
}

// reachable dials host:port.
func reachable(url string) bool {
	c, err := net.DialTimeout("tcp", url, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// firstURL is the first resolved port URL of an instance.
func firstURL(in *norsk.Instance) string {
	for _, m := range in.GetServicePortMappings() {
		for _, p := range m.GetMappings() {
			return p.GetUrl()
		}
	}
	return ""
}

// pidOf returns the pid of a running process-runtime service of a worker
// (0 when it does not run).
func pidOf(t testing.TB, c *testcluster.Cluster, worker, jobID, role string) int {
	t.Helper()
	return pidIn(t, worker, c.Worker(worker).Dir, jobID, role)
}

// pidIn is the pid of the running main process of an instance on the
// process-runtime worker node whose data directory is dir (0 if none).
func pidIn(t testing.TB, node, dir, jobID, role string) int {
	t.Helper()
	rt, err := process.New(process.Config{NodeID: node, ClusterID: workerpkg.ClusterIDOf(dir), Dir: filepath.Join(dir, "process"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("process runtime of %s: %v", node, err)
	}
	services, err := rt.List(context.Background())
	if err != nil {
		t.Fatalf("list %s: %v", node, err)
	}
	for _, s := range services {
		if s.Key.JobID == jobID && s.Key.Role == role && s.Running {
			return s.PID
		}
	}
	return 0
}
