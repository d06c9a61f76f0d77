package manager

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/cluster"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/manager/intercept"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/store"
)

// Cluster states a member starts in (cluster.StateNew, cluster.StateExisting).
const (
	ClusterStateNew      = cluster.StateNew
	ClusterStateExisting = cluster.StateExisting
)

// DefaultRaftPort is raft's default port in a cluster.
const DefaultRaftPort = cluster.DefaultRaftPort

// ClusterNode is a member of the cluster as config.yaml names it.
type ClusterNode = cluster.Node

func (c *Config) clustered() bool { return len(c.ClusterNodes) > 0 }

func (c *Config) clusterNode(name string) (ClusterNode, bool) {
	return cluster.FindNode(c.ClusterNodes, name)
}

// newMember is this Server's life in its cluster (internal/cluster): the
// store it reads through, the primary terms that run termWork.
func (s *Server) newMember() *cluster.Member {
	cfg := s.cfg
	return cluster.New(cluster.Config{
		Name: cfg.NodeName, DataDir: cfg.DataDir, URL: s.url,
		Nodes: cfg.ClusterNodes, State: cfg.ClusterState, Witness: cfg.Witness, Secret: cfg.ClusterSecret,
		HTTPClient: cfg.MemberHTTPClient, CA: s.tls.caCert(),
		Store: store.Config{
			Dir:               filepath.Join(cfg.DataDir, "raft"),
			MemberID:          cfg.NodeName,
			Logger:            cfg.Logger,
			SnapshotThreshold: cfg.SnapshotThreshold,
			OnApply:           s.metrics.onApply,
			HeartbeatTimeout:  cfg.RaftHeartbeatTimeout,
			ElectionTimeout:   cfg.RaftElectionTimeout,
			RaftBind:          cfg.RaftListen,
			RaftAdvertise:     cfg.RaftAdvertise,
			StreamLayer:       cfg.RaftStreamLayer,
			RaftTLS:           s.tls.raft, // nil with TLS off
		},
		Events:    events.Config{Events: cfg.EventBuffer, Retention: cfg.EventRetention, MaxBytes: cfg.EventMaxBytes, Clock: cfg.Clock},
		BackupDir: cfg.BackupDir, Boot: s.boot,
		Audit:         intercept.AuditStamp,
		ObserveCommit: func(d time.Duration) { s.metrics.commitSeconds.Observe(d.Seconds()) },
		CaughtUp:      s.verifyAuditChain,
		Work:          termWork{s},
		Clock:         cfg.Clock,
		Log:           s.log,
	})
}

// termWork is the Server's work as the primary (cluster.TermWork).
type termWork struct{ s *Server }

// Prepare migrates the store's schema.
func (w termWork) Prepare(ctx context.Context, st *store.Store) error { return w.s.migrate(ctx, st) }

// Boot makes the bootstrap admin token of a store that has none.
func (w termWork) Boot(ctx context.Context, st *store.Store) error {
	s := w.s
	tok, err := s.bootstrapToken(ctx, st)
	if err != nil || tok == "" {
		return err
	}
	s.mu.Lock()
	s.bootstrap = tok
	s.mu.Unlock()
	if s.cfg.BootstrapToken == "" {
		// The token itself is never logged: the binary shows it once.
		s.log.Warn("made the bootstrap admin token; it is shown once on the console, and the store keeps only its hash")
		if s.cfg.OnBootstrapToken != nil {
			s.cfg.OnBootstrapToken(tok)
		}
	}
	return nil
}

// Start drives the workers (the node controller), runs the AutoManager and
// the fleet's reaper and reconciliation, and takes backups, until the term
// ends.
func (w termWork) Start(ctx context.Context, t cluster.Term) (stop func()) {
	s, st := w.s, t.Store
	ctx, cancel := context.WithCancel(ctx)
	ctl := nodes.New(nodes.Config{
		Store:             st,
		Clock:             s.cfg.Clock,
		Logger:            s.cfg.Logger,
		LostGrace:         s.cfg.LostGrace,
		TakeoverGrace:     s.cfg.TakeoverGrace,
		LeaseTTL:          s.cfg.LeaseTTL,
		HeartbeatInterval: s.cfg.HeartbeatInterval,
		ManagerName:       s.cfg.NodeName,
		ManagerTerm:       t.Term,
		ManagerGeneration: t.Generation,
		ManagerURLs:       s.member.MemberURLs,
		Metrics:           s.nodeMetrics,
		WorkerTLS:         s.tls.workerTLS(),
		AccessReplicaJWKS: s.accessKeys.JWKS(),
		ControlPlanes:     s.member.ControlPlanes(),
		OnAllConnected: func() {
			s.member.Events().Record("takeover-settled", "every worker's stream is up under this primary", st.Term(), st.State().Snapshot().Generation())
		},
	})
	s.nodesRef.Store(ctl)
	var wg sync.WaitGroup
	for _, run := range []func(){
		func() { _ = ctl.Run(ctx) },
		func() { s.fleet.Run(ctx) }, // returns at once without a provider
		func() { s.runAutoManager(ctx) },
		func() { s.runBackups(ctx, st) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	return func() {
		cancel()
		wg.Wait()
		s.nodesRef.CompareAndSwap(ctl, nil)
	}
}
