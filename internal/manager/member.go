package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/cluster"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
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
	for _, n := range c.ClusterNodes {
		if n.Name == name {
			return n, true
		}
	}
	return ClusterNode{}, false
}

// memberState runs the member's life: the store's incarnations, the
// primary's terms, and (in a cluster) joining and rejoining.
type memberState struct {
	s *Server

	mu sync.Mutex
	// restart asks run to replace the store (a recovery).
	restart chan func() error
	// termReady is closed when the first primary term's boot work is done
	// (or failed, termErr).
	termReady chan struct{}
	termOnce  sync.Once
	termErr   error
	// verified: the audit chain has been checked since this boot.
	verified bool
	// announce is the norsk-mgr announcement this member received.
	announce announcement
	events   *cluster.Events
	// primaryReady: this member leads and has confirmed that no member is
	// at a newer generation; writes wait for it (a former member that comes
	// back after a forced recovery must not acknowledge a write it will
	// discard).
	primaryReady atomic.Bool
	// knownGen is the newest generation seen (generationFile).
	knownGen atomic.Uint64
	// terms ends every primary term, now and to come: Close cancels it
	// before it stops serving, so the AutoManager and the node controller
	// stop while the API still answers, instead of meeting a closed API
	// and acting on the refusals (a migration aborted because its notify
	// found the listener gone).
	terms     context.Context
	stopTerms context.CancelFunc
	// termsRunning counts the primary terms under way (endTerms waits).
	termsRunning sync.WaitGroup
}

// startTerm counts a primary term about to start, unless terms have been
// ended (Close).
func (m *memberState) startTerm() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.terms.Err() != nil {
		return false
	}
	m.termsRunning.Add(1)
	return true
}

// endTerms ends the primary term under way, if any, and every later one,
// and waits (within ctx) until the term's work has stopped.
func (m *memberState) endTerms(ctx context.Context) {
	m.mu.Lock()
	m.stopTerms()
	m.mu.Unlock()
	done := make(chan struct{})
	go func() {
		m.termsRunning.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// announcement is a norsk-mgr's AnnounceControlPlane, answered locally.
type announcement struct {
	url      string
	interval time.Duration
	at       time.Time
}

func newMemberState(s *Server) *memberState {
	m := &memberState{
		s:         s,
		restart:   make(chan func() error, 1),
		termReady: make(chan struct{}),
		events:    cluster.OpenEvents(s.cfg.DataDir, s.cfg.Clock, s.log),
	}
	m.terms, m.stopTerms = context.WithCancel(context.Background())
	m.loadGeneration()
	return m
}

// loadGeneration reads generationFile.
func (m *memberState) loadGeneration() {
	b, err := os.ReadFile(filepath.Join(m.s.cfg.DataDir, generationFile))
	if err != nil {
		return
	}
	if g, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
		m.knownGen.Store(g)
	}
}

// noteGeneration records the generation st has applied if it is newer.
func (m *memberState) noteGeneration(st *store.Store) {
	g := st.State().Snapshot().Generation()
	if g <= m.knownGen.Load() {
		return
	}
	if err := writeFileSync(filepath.Join(m.s.cfg.DataDir, generationFile), []byte(strconv.FormatUint(g, 10)+"\n")); err != nil {
		m.s.log.Warn("could not record the cluster generation", "err", err)
		return
	}
	m.knownGen.Store(g)
}

// generation is the generation of this member's copy: what it has applied,
// or what it last saw applied before a restart; 0 for an empty copy.
func (m *memberState) generation(st *store.Store) uint64 {
	if st.LastIndex() == 0 {
		return 0
	}
	g := max(st.State().Snapshot().Generation(), m.knownGen.Load())
	return max(g, 1) // a copy with entries is at least at the first
}

func (m *memberState) firstTermReady() <-chan struct{} { return m.termReady }

func (m *memberState) firstTermErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.termErr
}

func (m *memberState) termDone(err error) {
	m.termOnce.Do(func() {
		m.mu.Lock()
		m.termErr = err
		m.mu.Unlock()
		close(m.termReady)
	})
}

// storeConfig is the store's configuration for this member.
func (s *Server) storeConfig(join bool) store.Config {
	cfg := s.cfg
	sc := store.Config{
		Dir:               filepath.Join(cfg.DataDir, "raft"),
		MemberID:          cfg.NodeName,
		Logger:            cfg.Logger,
		Broker:            events.New(cfg.EventBuffer),
		SnapshotThreshold: cfg.SnapshotThreshold,
		OnApply:           s.metrics.onApply,
		HeartbeatTimeout:  cfg.RaftHeartbeatTimeout,
		ElectionTimeout:   cfg.RaftElectionTimeout,
		Join:              join,
	}
	if cfg.clustered() {
		sc.RaftBind = cfg.RaftListen
		sc.RaftAdvertise = cfg.RaftAdvertise
		sc.StreamLayer = cfg.RaftStreamLayer
		sc.RaftTLS = s.tls.raft // nil with TLS off
		for _, n := range cfg.ClusterNodes {
			sc.Bootstrap = append(sc.Bootstrap, store.Voter(n.Name, n.Raft))
		}
	}
	return sc
}

// openStore opens the member's store for this boot: discarding it first
// when LeaveQuorum asked for that, restoring (standalone) or rejoining (in a
// cluster) when it cannot be read.
func (s *Server) openStore(ctx context.Context) error {
	join := s.cfg.clustered() && s.cfg.ClusterState == ClusterStateExisting
	if _, err := os.Stat(filepath.Join(s.cfg.DataDir, joinMarker)); err == nil {
		join = true
	}
	if _, err := os.Stat(filepath.Join(s.cfg.DataDir, leaveMarker)); err == nil {
		moved, err := discardStore(s.cfg)
		if err != nil {
			return err
		}
		s.member.events.Record("leave-quorum", fmt.Sprintf("discarded this member's copy (moved to %s); rejoining as a follower", moved), 0, 0)
		join = true
	}
	var st *store.Store
	var err error
	if s.cfg.clustered() {
		st, err = store.Open(ctx, s.storeConfig(join))
		if err != nil && ctx.Err() == nil && errors.Is(err, store.ErrUnreadable) {
			// A cluster member's state comes from its peers: an
			// unreadable copy is put aside and the member rejoins. (An
			// error of the environment — a port in use, a full disk —
			// discards nothing.)
			moved, derr := discardStore(s.cfg)
			if derr != nil {
				return fmt.Errorf("%w; and it cannot be moved aside: %v", err, derr)
			}
			s.log.Error("the store cannot be read; rejoining the cluster with an empty copy", "err", err, "moved_to", moved)
			s.member.events.Record("rejoined", "the store could not be read ("+err.Error()+"); moved to "+moved+", rejoining", 0, 0)
			s.boot.RestoreReason = err.Error()
			s.boot.UnreadableStoreMovedTo = moved
			st, err = store.Open(ctx, s.storeConfig(true))
		}
	} else {
		st, err = openStandaloneStore(ctx, s.cfg, s.storeConfig(false), s.boot)
	}
	if err != nil {
		return err
	}
	s.storeRef.Store(st)
	return nil
}

// discardStore moves the raft store aside (never deleting it), marks the
// member as rejoining and removes the leave marker.
func discardStore(cfg Config) (string, error) {
	if err := writeFileSync(filepath.Join(cfg.DataDir, joinMarker), []byte("rejoining since "+cfg.Clock.Now().UTC().Format(time.RFC3339)+"\n")); err != nil {
		return "", err
	}
	dir := filepath.Join(cfg.DataDir, "raft")
	moved := dir + ".discarded-" + cfg.Clock.Now().UTC().Format("20060102T150405.000000000Z")
	if _, err := os.Stat(dir); err == nil {
		if err := os.Rename(dir, moved); err != nil {
			return "", fmt.Errorf("move %s aside: %w", dir, err)
		}
	} else {
		moved = ""
	}
	if err := os.Remove(filepath.Join(cfg.DataDir, leaveMarker)); err != nil && !os.IsNotExist(err) {
		return moved, err
	}
	return moved, nil
}

// run is the member's main loop: it runs a primary term whenever this member
// leads, verifies the audit chain once caught up, keeps a cluster member
// joined and current, and replaces the store when a recovery asks.
func (m *memberState) run(ctx context.Context) {
	for {
		done := m.runIncarnation(ctx)
		select {
		case <-ctx.Done():
			return
		case fn := <-done:
			if err := m.replaceStore(ctx, fn); err != nil {
				m.s.log.Error("recovery failed; the member keeps its old store closed and retries in 5s", "err", err)
				m.events.Record("recovery-failed", err.Error(), 0, 0)
				select {
				case <-ctx.Done():
					return
				case <-time.After(5 * time.Second):
				}
				// Try to come back as we are.
				_ = m.replaceStore(ctx, nil)
			}
		}
	}
}

// runIncarnation runs everything that depends on the current store until
// ctx ends (nil) or a recovery asks for a new store (the function to run
// between closing and reopening it).
func (m *memberState) runIncarnation(ctx context.Context) <-chan func() error {
	st := m.s.st()
	ictx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	out := make(chan func() error, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		m.leadership(ictx, st)
	}()
	go func() {
		defer wg.Done()
		m.keepCurrent(ictx, st)
	}()
	go func() {
		var fn func() error
		select {
		case <-ctx.Done():
		case fn = <-m.restart:
		}
		cancel()
		wg.Wait()
		if fn != nil {
			out <- fn
		}
	}()
	return out
}

// requestRestart asks run to close the store, run fn, and open it again.
func (m *memberState) requestRestart(fn func() error) bool {
	select {
	case m.restart <- fn:
		return true
	default:
		return false // one is already under way
	}
}

// replaceStore closes the store, runs fn (nil: nothing) and reopens it. The
// API keeps serving meanwhile; calls fail with UNAVAILABLE for a moment,
// and event streams end (clients resume).
func (m *memberState) replaceStore(ctx context.Context, fn func() error) error {
	s := m.s
	old := s.st()
	old.Broker().Close()
	if err := old.Close(); err != nil {
		s.log.Warn("closing the store for a recovery", "err", err)
	}
	if fn != nil {
		if err := fn(); err != nil {
			if rerr := s.openStore(ctx); rerr != nil {
				return fmt.Errorf("%w; and reopening: %v", err, rerr)
			}
			return err
		}
	}
	m.mu.Lock()
	m.verified = false
	m.mu.Unlock()
	return s.openStore(ctx)
}

// leadership runs a primary term each time this member leads.
func (m *memberState) leadership(ctx context.Context, st *store.Store) {
	var termCancel context.CancelFunc
	var termDone chan struct{}
	stop := func() {
		m.primaryReady.Store(false)
		if termCancel != nil {
			termCancel()
			<-termDone
			termCancel = nil
		}
	}
	defer stop()
	leading := false
	var termOf uint64 // the raft term the running primary term is for
	check := time.NewTicker(250 * time.Millisecond)
	defer check.Stop()
	for {
		now := st.IsLeader()
		if now && leading {
			// Leadership lost and won back between two looks (a new raft
			// term), or a term that ended by itself while this member still
			// leads (a witness whose hand-over raced an election): start a
			// fresh primary term rather than lead with none.
			ended := false
			select {
			case <-termDone:
				ended = true
			default:
			}
			if ended || st.Term() != termOf {
				stop()
				leading = false
			}
		}
		if now && !leading && m.startTerm() {
			termOf = st.Term()
			tctx, cancel := context.WithCancel(ctx)
			stopFollowing := context.AfterFunc(m.terms, cancel)
			termCancel = func() { stopFollowing(); cancel() }
			termDone = make(chan struct{})
			go func(done chan struct{}) {
				defer m.termsRunning.Done()
				defer close(done)
				m.primaryTerm(tctx, st)
			}(termDone)
			m.events.Record("role-change", "became the primary", st.Term(), st.State().Snapshot().Generation())
		} else if !now && leading {
			stop()
			leader, _ := st.Leader()
			m.events.Record("role-change", "no longer the primary (the primary is now "+orNone(leader)+")", st.Term(), st.State().Snapshot().Generation())
		}
		leading = now
		select {
		case <-ctx.Done():
			return
		case <-st.LeaderNotify():
		case <-check.C:
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// primaryTerm is what the primary does while it leads: finish the boot work
// the store needs (schema, membership, the bootstrap token), then drive the
// workers and take backups until the term ends.
func (m *memberState) primaryTerm(ctx context.Context, st *store.Store) {
	s := m.s
	if s.cfg.Witness {
		m.handOver(ctx, st)
		return
	}
	if err := st.Barrier(); err != nil {
		s.log.Warn("primary term: barrier", "err", err)
		m.termDone(err)
		return
	}
	if s.cfg.clustered() && m.newerGeneration(ctx, st, 300*time.Millisecond) {
		return
	}
	err := m.bootWork(ctx, st)
	m.termDone(err)
	if err != nil {
		s.log.Error("primary term: boot work failed", "err", err)
		return
	}
	m.primaryReady.Store(true)
	ctl := nodes.New(nodes.Config{
		Store:             st,
		Clock:             s.cfg.Clock,
		Logger:            s.cfg.Logger,
		LostGrace:         s.cfg.LostGrace,
		TakeoverGrace:     s.cfg.TakeoverGrace,
		LeaseTTL:          s.cfg.LeaseTTL,
		HeartbeatInterval: s.cfg.HeartbeatInterval,
		ManagerName:       s.cfg.NodeName,
		ManagerTerm:       st.Term(),
		ManagerGeneration: st.State().Snapshot().Generation(),
		ManagerURLs:       s.memberURLs,
		Metrics:           s.nodeMetrics,
		WorkerTLS:         s.tls.workerTLS(),
		AccessReplicaJWKS: s.accessKeys.JWKS(),
		ControlPlanes:     &s.controlPlanes,
		OnAllConnected: func() {
			m.events.Record("takeover-settled", "every worker's stream is up under this primary", st.Term(), st.State().Snapshot().Generation())
		},
	})
	s.nodesRef.Store(ctl)
	defer s.nodesRef.CompareAndSwap(ctl, nil)
	var wg sync.WaitGroup
	wg.Add(5)
	go func() {
		defer wg.Done()
		_ = ctl.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		s.runControlPlanes(ctx)
	}()
	go func() {
		defer wg.Done()
		s.fleet.Run(ctx) // returns at once without a provider
	}()
	go func() {
		defer wg.Done()
		s.runAutoManager(ctx)
	}()
	go func() {
		defer wg.Done()
		s.runBackups(ctx, st)
	}()
	wg.Wait()
}

// handOver is a witness's term: it votes, so it can be elected, but it
// never stays primary. It hands the role to a full member it can reach,
// trying each in turn until one takes it or the term ends.
func (m *memberState) handOver(ctx context.Context, st *store.Store) {
	s := m.s
	s.log.Info("this witness was elected; handing the primary role to a full member")
	why := "a witness was elected"
	for ctx.Err() == nil && st.IsLeader() {
		if s.handOff(ctx, st, why) == nil {
			return
		}
		why = "" // recorded once
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// bootWork brings the store to this binary's needs; only the primary writes.
func (m *memberState) bootWork(ctx context.Context, st *store.Store) error {
	s := m.s
	if err := s.migrate(ctx, st); err != nil {
		return err
	}
	r := st.State().Snapshot()
	if r.Generation() == 0 {
		members := []*storev1.MemberRecord{{Name: s.cfg.NodeName, RaftAddress: st.Addr(), ApiUrl: s.url, Status: state.MemberJoined}}
		if s.cfg.clustered() {
			members = nil
			for _, n := range s.cfg.ClusterNodes {
				members = append(members, &storev1.MemberRecord{Name: n.Name, RaftAddress: n.Raft, ApiUrl: n.API, Witness: n.Witness, Status: state.MemberJoined})
			}
		}
		if _, err := st.Apply(ctx, &storev1.Command{
			Time: timestamppb.New(s.cfg.Clock.Now()),
			Cmd:  &storev1.Command_InitCluster{InitCluster: &storev1.InitCluster{Members: members, ClusterId: NewClusterID()}},
		}); err != nil {
			return fmt.Errorf("record the cluster's members: %w", err)
		}
		s.log.Info("initialised the store", "cluster_id", st.State().Snapshot().ClusterID())
	} else if r.ClusterID() == "" {
		// A store initialised before cluster ids gets one, once (the FSM
		// keeps the first recorded).
		id := NewClusterID()
		if _, err := st.Apply(ctx, &storev1.Command{
			Time: timestamppb.New(s.cfg.Clock.Now()),
			Cmd:  &storev1.Command_InitCluster{InitCluster: &storev1.InitCluster{ClusterId: id}},
		}); err != nil {
			return fmt.Errorf("record the cluster id: %w", err)
		}
		s.log.Info("this store had no cluster id; recorded one", "cluster_id", st.State().Snapshot().ClusterID())
	}
	// Keep this member's own addresses current in the membership.
	if me := st.State().Snapshot().Member(s.cfg.NodeName); me != nil && me.GetStatus() != state.MemberRetired &&
		(me.GetApiUrl() != s.url || me.GetRaftAddress() != st.Addr()) {
		if _, err := st.Apply(ctx, &storev1.Command{
			Time: timestamppb.New(s.cfg.Clock.Now()),
			Cmd: &storev1.Command_MemberJoined{MemberJoined: &storev1.MemberJoined{
				Name: s.cfg.NodeName, RaftAddress: st.Addr(), ApiUrl: s.url, Witness: s.cfg.Witness,
			}},
		}); err != nil {
			s.log.Warn("could not record this member's addresses", "err", err)
		}
	}
	if err := m.finishForced(ctx, st); err != nil {
		return err
	}
	tok, err := s.bootstrapToken(ctx, st)
	if err != nil {
		return err
	}
	if tok != "" {
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
	}
	m.verifyOnce(st)
	return nil
}

// verifyOnce checks the audit chain the first time this member is caught up
// since it booted (or recovered).
func (m *memberState) verifyOnce(st *store.Store) {
	m.mu.Lock()
	done := m.verified
	m.verified = true
	m.mu.Unlock()
	if !done {
		m.s.verifyAuditChain(st)
	}
}

// keepCurrent, on every member: verify the audit chain once caught up; in a
// cluster, join when not yet a member and rejoin when the cluster moved on
// to a newer generation without us.
func (m *memberState) keepCurrent(ctx context.Context, st *store.Store) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	var lastJoin, lastGenCheck time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !st.IsLeader() {
			if c := st.CommitIndex(); c > 0 && st.State().Snapshot().Index() >= c {
				m.verifyOnce(st)
			}
		}
		if st.State().Snapshot().Generation() > 0 {
			m.noteGeneration(st)
			m.joined()
		}
		if !m.s.cfg.clustered() {
			continue
		}
		conf, err := st.Configuration()
		if err != nil {
			continue
		}
		if len(conf) == 0 {
			// Not in any configuration yet: ask the cluster to add us.
			if time.Since(lastJoin) > 2*time.Second {
				lastJoin = time.Now()
				m.tryJoin(ctx, st)
			}
			continue
		}
		leader, _ := st.Leader()
		lost := leader == "" && time.Since(st.LastContact()) > 5*time.Second
		if (lost || st.IsLeader()) && time.Since(lastGenCheck) > 2*time.Second {
			lastGenCheck = time.Now()
			m.newerGeneration(ctx, st, time.Second)
		}
		if m.primaryReady.Load() {
			m.promoteCaughtUp(ctx, st)
		}
	}
}

// joined clears the rejoining mark once the member holds the cluster's
// state again.
func (m *memberState) joined() {
	path := filepath.Join(m.s.cfg.DataDir, joinMarker)
	if _, err := os.Stat(path); err != nil {
		return
	}
	if err := os.Remove(path); err == nil {
		m.events.Record("member-joined", "this member holds the cluster's state again", 0, 0)
	}
}

// tryJoin asks each known member to add this one (whoever is asked passes
// the request to its primary).
func (m *memberState) tryJoin(ctx context.Context, st *store.Store) {
	s := m.s
	req := &managerv1.JoinRequest{Name: s.cfg.NodeName, RaftAddress: st.Addr(), ApiUrl: s.url, Witness: s.cfg.Witness}
	for _, url := range s.peerURLs() {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := s.memberClient(url).Join(cctx, newMemberRequest(s, req))
		cancel()
		if err == nil {
			s.log.Info("asked the cluster to add this member", "via", url)
			return
		}
		s.log.Debug("join not accepted yet", "via", url, "err", err)
	}
}

// newerGeneration asks the other members (each answering within timeout)
// whether one is at a newer generation than this member's copy: then this
// copy is from before a forced recovery. It is put aside and the member
// rejoins as a follower — it never competes with the newer cluster. A
// primary checks at the start of each term (before it acknowledges a write)
// and every few seconds; a member without a primary checks too.
func (m *memberState) newerGeneration(ctx context.Context, st *store.Store, timeout time.Duration) bool {
	s := m.s
	mine := m.generation(st)
	if mine == 0 {
		return false // no copy yet: it is replicated to, or joins
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, p := range s.peerStatuses(cctx) {
		if p.err != nil || p.status.GetGeneration() <= mine {
			continue
		}
		reason := fmt.Sprintf("member %s is at generation %d (primary %s); this copy is at generation %d", p.name, p.status.GetGeneration(), orNone(p.status.GetLeader()), mine)
		s.log.Warn("this member's copy is from an older generation; putting it aside and rejoining", "why", reason)
		m.events.Record("rejoined", reason+": put this copy aside and rejoined as a follower", st.Term(), mine)
		m.requestRestart(func() error {
			moved, err := discardStore(s.cfg)
			if err == nil {
				s.log.Warn("the older copy was moved aside", "moved_to", moved)
			}
			return err
		})
		return true
	}
	return false
}

// peerURLs are the API URLs of the other members this one knows of.
func (s *Server) peerURLs() []string {
	seen := map[string]bool{s.url: true}
	var out []string
	add := func(u string) {
		if u != "" && !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	if st := s.st(); st != nil {
		for _, mr := range st.State().Snapshot().Members() {
			if mr.GetName() != s.cfg.NodeName && mr.GetStatus() != state.MemberRetired {
				add(mr.GetApiUrl())
			}
		}
	}
	for _, n := range s.cfg.ClusterNodes {
		if n.Name != s.cfg.NodeName {
			add(n.API)
		}
	}
	return out
}

// memberURLs are every full member's API URL (for workers to re-register
// with after a failover).
func (s *Server) memberURLs() []string {
	urls := []string{s.url}
	seen := map[string]bool{s.url: true}
	for _, mr := range s.st().State().Snapshot().Members() {
		if mr.GetWitness() || mr.GetStatus() == state.MemberRetired || mr.GetApiUrl() == "" || seen[mr.GetApiUrl()] {
			continue
		}
		seen[mr.GetApiUrl()] = true
		urls = append(urls, mr.GetApiUrl())
	}
	return urls
}

var errNotClustered = errors.New("this Manager is a standalone member")

// IsPrimaryReady reports whether this member is the primary and has
// finished taking over (a standalone member: it leads).
func (s *Server) IsPrimaryReady() bool {
	st := s.st()
	if st == nil || !st.IsLeader() {
		return false
	}
	return !s.cfg.clustered() || s.member.primaryReady.Load()
}

// Files in the data directory that drive a member's recovery.
const (
	// leaveMarker: LeaveQuorum was called; the next boot discards the copy.
	leaveMarker = "LEAVE-QUORUM"
	// joinMarker: this member's copy was put aside; until it has joined a
	// cluster again it starts as a joining member (never bootstrapping one
	// from clusterNodes), whatever clusterState says.
	joinMarker = "REJOINING"
	// generationFile holds the newest cluster generation this member has
	// seen applied: after a restart its store applies nothing until it
	// hears from a primary, so the state alone cannot tell which generation
	// its copy is from.
	generationFile = "GENERATION"
)

// writeFileSync writes a small file durably.
func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
