package worker_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// TestUnreadableRecordDoesNotKillTheInstance: a worker that cannot read an
// instance's record (here one written by a newer worker version, as after a
// rolled-back upgrade) leaves that instance's running services alone rather
// than stopping them as orphans.
func TestUnreadableRecordDoesNotKillTheInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("live", svc("main")), "primary", 5)
	pid := pidOf(t, e.dataDir, "live", "main")
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// The record as a newer worker version would have written it.
	paths, _ := filepath.Glob(filepath.Join(e.dataDir, "instances", "*.json"))
	if len(paths) != 1 {
		t.Fatalf("records: %v", paths)
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["version"] = 2
	b, _ = json.Marshal(m)
	if err := os.WriteFile(paths[0], b, 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := e.config()
	cfg.Token = ""
	a = e.run(cfg)
	time.Sleep(2 * time.Second)
	if !alive(pid) {
		t.Fatalf("the running service (pid %d) of an instance whose record this worker could not read was stopped as an orphan", pid)
	}

	// The Manager's start of the same binding takes the running service
	// over as it is; a stop then stops it.
	c, _ = e.dial(a, noHeartbeats)
	startRunning(t, c, job("live", svc("main")), "primary", 5)
	if got := pidOf(t, e.dataDir, "live", "main"); got != pid || !alive(pid) {
		t.Fatalf("after the start: pid %d (alive %v), want the running %d kept", got, alive(got), pid)
	}
	seq := send(t, c, stopMsg("live", "primary", 5, 0, managerv1.StoppingReason_STOPPING_REASON_USER_REQUESTED, ""))
	expectReport(t, c, phaseStopping)
	expectReport(t, c, phaseStopped)
	expectAck(t, c, seq, "")
	waitDead(t, pid)
}

// An unreadable record whose instance runs nothing is put aside at start
// (kept, outside the records), and protects nothing: services no record
// names are still stopped as orphans.
func TestUnreadableRecordOfNothingIsPutAside(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.run(e.config())
	c, _ := e.dial(a, noHeartbeats)
	startRunning(t, c, job("orphan", svc("main")), "primary", 5)
	pid := pidOf(t, e.dataDir, "orphan", "main")
	c.Close()
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	dir := filepath.Join(e.dataDir, "instances")
	paths, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(paths) != 1 {
		t.Fatalf("records: %v", paths)
	}
	if err := os.Remove(paths[0]); err != nil { // its services are now orphans
		t.Fatal(err)
	}
	damaged := filepath.Join(dir, "gone_primary_00000000.json")
	if err := os.WriteFile(damaged, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := e.config()
	cfg.Token = ""
	e.run(cfg)
	waitDead(t, pid)
	if _, err := os.Stat(damaged); err == nil {
		t.Errorf("the unreadable record %s is still among the records", damaged)
	}
	if aside, _ := filepath.Glob(damaged + ".unreadable-*"); len(aside) != 1 {
		t.Errorf("the unreadable record was not kept aside: %v", aside)
	}
}
