package tests

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// A fresh Manager exports every metric an alert reads, its labelled
// counters at zero from the start: raft health, instances and nodes by
// state, lease state, backups, event-stream drops and window, placements, restarts,
// migrations and drains.
func TestMetricsOnAFreshManager(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{Workers: 1})
	c.WaitNodeState("worker-1", norsk.NodeStateOnline)
	res, err := http.Get(c.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	body := string(b)
	for _, want := range []string{
		"norsk_manager_raft_is_leader 1",
		"norsk_manager_raft_term ",
		"norsk_manager_raft_commit_index ",
		"norsk_manager_raft_applied_index ",
		"norsk_manager_raft_commit_seconds_bucket",
		`norsk_manager_instances{phase="running"} 0`,
		`norsk_manager_nodes{state="online"} 1`,
		`norsk_manager_nodes{state="lost"} 0`,
		"norsk_manager_nodes_draining 0",
		"norsk_manager_service_restarts_total 0",
		"norsk_manager_leases_paused 0",
		"norsk_manager_backup_last_success 1",
		"norsk_manager_event_subscribers_dropped_total 0",
		"norsk_manager_event_resyncs_total 0",
		"norsk_manager_events_held ",
		"norsk_manager_events_held_bytes ",
		"norsk_manager_events_oldest_age_seconds ",
		"norsk_manager_events_dropped_early_total 0",
		`norsk_automanager_placements_total{kind="recovery"} 0`,
		`norsk_automanager_placement_seconds_count{kind="first"} 0`,
		`norsk_automanager_instance_restarts_total{why="nodeLost"} 0`,
		`norsk_automanager_migrations_started_total{strategy="handover"} 0`,
		`norsk_automanager_migration_seconds_count{outcome="aborted",strategy="overlap"} 0`,
		`norsk_automanager_drains_ended_total{outcome="notDrained"} 0`,
		`norsk_manager_api_refused_unread_total{code="unauthenticated"} 0`,
		"norsk_manager_store_disk_free_bytes ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
