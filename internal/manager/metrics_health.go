package manager

import (
	"strings"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/store"
)

// healthCollector computes, on each scrape, the gauges an on-call engineer
// pages on: raft's health, instances by phase and nodes by state (from the
// counts the FSM keeps as it writes: nothing is scanned), lease state and
// backup age. Every label value is exported from the start, zero included.
type healthCollector struct {
	s *Server

	isLeader, term, commitIndex, appliedIndex, lastIndex *prometheus.Desc
	leaderContact, followerContact, snapshotAge          *prometheus.Desc
	instances, nodes, nodesDraining                      *prometheus.Desc
	leasesPaused, backupAge, backupOK                    *prometheus.Desc
	serviceRestarts                                      *prometheus.Desc
}

func newHealthCollector(s *Server) *healthCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &healthCollector{
		s:               s,
		isLeader:        d("norsk_manager_raft_is_leader", "1 on the member that is the raft leader (the primary), 0 elsewhere."),
		term:            d("norsk_manager_raft_term", "The raft term this member is in."),
		commitIndex:     d("norsk_manager_raft_commit_index", "The highest raft index this member knows committed."),
		appliedIndex:    d("norsk_manager_raft_applied_index", "The highest raft index this member has applied to its state."),
		lastIndex:       d("norsk_manager_raft_last_index", "The last raft index in this member's log."),
		leaderContact:   d("norsk_manager_raft_leader_last_contact_seconds", "On a follower: seconds since it last heard from the leader (absent on the leader and before any contact)."),
		followerContact: d("norsk_manager_raft_follower_last_contact_seconds", "On the leader: seconds since each follower last answered a heartbeat or an append (per follower member).", "follower"),
		snapshotAge:     d("norsk_manager_raft_snapshot_age_seconds", "Seconds since this member's newest raft snapshot was taken (absent before the first)."),
		instances:       d("norsk_manager_instances", "Job instances by phase, as the store holds them.", "phase"),
		nodes:           d("norsk_manager_nodes", "Nodes by state, as the store holds them.", "state"),
		nodesDraining:   d("norsk_manager_nodes_draining", "Nodes marked draining (taking no new work)."),
		leasesPaused:    d("norsk_manager_leases_paused", "1 while leases are paused (PauseLeases), 0 otherwise."),
		backupAge:       d("norsk_manager_backup_age_seconds", "Seconds since the newest backup in the backup directory (absent when there is none)."),
		backupOK:        d("norsk_manager_backup_last_success", "1 if this member's last scheduled backup succeeded, 0 if it failed (1 before the first)."),
		serviceRestarts: d("norsk_manager_service_restarts_total", "Service restarts workers made in place under the services' restart policies, as they reported them."),
	}
}

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.isLeader, c.term, c.commitIndex, c.appliedIndex, c.lastIndex, c.leaderContact, c.followerContact,
		c.snapshotAge, c.instances, c.nodes, c.nodesDraining, c.leasesPaused, c.backupAge, c.backupOK, c.serviceRestarts} {
		ch <- d
	}
}

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	now := c.s.cfg.Clock.Now()
	st := c.s.st()
	if st != nil {
		h := st.Health()
		gauge(c.isLeader, b2f(h.Leader))
		gauge(c.term, float64(h.Term))
		gauge(c.commitIndex, float64(h.CommitIndex))
		gauge(c.appliedIndex, float64(h.AppliedIndex))
		gauge(c.lastIndex, float64(h.LastIndex))
		if !h.LastContact.IsZero() {
			gauge(c.leaderContact, max(time.Since(h.LastContact).Seconds(), 0))
		}
		if !h.SnapshotAt.IsZero() {
			gauge(c.snapshotAge, max(time.Since(h.SnapshotAt).Seconds(), 0))
		}
		if h.Leader {
			if conf, err := st.Configuration(); err == nil {
				for _, sv := range conf {
					if string(sv.ID) == c.s.cfg.NodeName {
						continue
					}
					if at := peerContacts.last(string(sv.ID)); !at.IsZero() {
						gauge(c.followerContact, max(time.Since(at).Seconds(), 0), string(sv.ID))
					}
				}
			}
		}
		counts := st.State().Counts()
		for v, name := range managerv1.InstancePhase_name {
			if v == 0 {
				continue
			}
			gauge(c.instances, float64(counts.InstancesByPhase[managerv1.InstancePhase(v)]), enumLabel(name, "INSTANCE_PHASE_"))
		}
		for v, name := range managerv1.NodeState_name {
			if v == 0 {
				continue
			}
			gauge(c.nodes, float64(counts.NodesByState[managerv1.NodeState(v)]), enumLabel(name, "NODE_STATE_"))
		}
		gauge(c.nodesDraining, float64(counts.NodesDraining))
		ch <- prometheus.MustNewConstMetric(c.serviceRestarts, prometheus.CounterValue, float64(counts.ServiceRestarts))
		gauge(c.leasesPaused, b2f(st.State().Snapshot().LeaseState().GetPaused()))
	}
	if at := c.s.backups.newest(c.s.cfg.BackupDir, now); !at.IsZero() {
		gauge(c.backupAge, max(now.Sub(at).Seconds(), 0))
	}
	gauge(c.backupOK, b2f(c.s.backups.lastOK()))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// enumLabel is an enum value's name as a label: "INSTANCE_PHASE_RUNNING" →
// "running".
func enumLabel(name, prefix string) string { return strings.ToLower(strings.TrimPrefix(name, prefix)) }

// backupWatch remembers the last scheduled backup's result and caches the
// newest backup's time (re-listed at most every 30 s: a scrape does no
// directory walk of its own more often).
type backupWatch struct {
	mu      sync.Mutex
	failed  bool
	listed  time.Time
	newestT time.Time
}

func (b *backupWatch) result(err error, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failed = err != nil
	if err == nil && at.After(b.newestT) {
		b.newestT = at
	}
}

func (b *backupWatch) lastOK() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.failed
}

func (b *backupWatch) newest(dir string, now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if dir != "" && (b.listed.IsZero() || now.Sub(b.listed) > 30*time.Second) {
		b.listed = now
		if list, err := store.ListBackups(dir); err == nil && len(list) > 0 && list[0].CreatedAt.After(b.newestT) {
			b.newestT = list[0].CreatedAt
		}
	}
	return b.newestT
}

// peerContacts is when raft, on this process's leader, last heard from each
// follower: fed by raft's own telemetry (go-metrics samples of each
// heartbeat and append, labelled with the peer), process-wide because raft
// reports through go-metrics' global sink.
var peerContacts = &contactSink{at: map[string]time.Time{}}

var installContactSink sync.Once

// watchRaftPeers installs the sink (once per process).
func watchRaftPeers() {
	installContactSink.Do(func() {
		conf := gometrics.DefaultConfig("")
		conf.EnableHostname, conf.EnableRuntimeMetrics, conf.EnableServiceLabel, conf.EnableHostnameLabel = false, false, false, false
		conf.FilterDefault = false
		conf.AllowedPrefixes = []string{"raft.replication.heartbeat", "raft.replication.appendEntries.rpc"}
		_, _ = gometrics.NewGlobal(conf, peerContacts)
	})
}

// contactSink is a go-metrics sink that keeps only the time of each peer's
// last heartbeat or append sample.
type contactSink struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (c *contactSink) last(peer string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[peer]
}

func (c *contactSink) saw(peer string) {
	if peer == "" {
		return
	}
	c.mu.Lock()
	c.at[peer] = time.Now()
	c.mu.Unlock()
}

func (c *contactSink) AddSampleWithLabels(key []string, _ float32, labels []gometrics.Label) {
	for _, l := range labels {
		if l.Name == "peer_id" {
			c.saw(l.Value)
		}
	}
}
func (c *contactSink) SetGauge([]string, float32)                                 {}
func (c *contactSink) SetGaugeWithLabels([]string, float32, []gometrics.Label)    {}
func (c *contactSink) EmitKey([]string, float32)                                  {}
func (c *contactSink) IncrCounter([]string, float32)                              {}
func (c *contactSink) IncrCounterWithLabels([]string, float32, []gometrics.Label) {}
func (c *contactSink) AddSample([]string, float32)                                {}

var _ gometrics.MetricSink = (*contactSink)(nil)
