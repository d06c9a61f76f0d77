package cluster

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/store"
)

// Term is one primary term of this member: the store it leads and the raft
// term and cluster generation it leads at.
type Term struct {
	Store      *store.Store
	Term       uint64
	Generation uint64
}

// TermWork is what the rest of the daemon does as the primary. The Member
// calls it from the goroutine of one primary term at a time, in order:
// Prepare, then (the membership recorded) Boot, then Start; a term whose
// boot work fails is not started. Every Start is matched by exactly one
// call of the stop it returns, when the term ends (leadership lost, a
// recovery, Stop).
type TermWork interface {
	// Prepare brings the store to this binary's needs before the member
	// records the membership (the schema migration).
	Prepare(ctx context.Context, st *store.Store) error
	// Boot finishes the boot work once the membership is current (the
	// bootstrap token).
	Boot(ctx context.Context, st *store.Store) error
	// Start starts the term's work (node controller, AutoManager, backups,
	// the fleet) under ctx, which ends with the term, and returns its stop:
	// it ends that work and returns once it has stopped.
	Start(ctx context.Context, t Term) (stop func())
}

// Config configures a Member.
type Config struct {
	// Name is this member's name (its raft id), DataDir its data
	// directory, URL the API URL the other members and workers reach it at.
	Name    string
	DataDir string
	URL     string
	// Nodes are the cluster's members, this one included (empty: a
	// standalone member). State is StateNew or StateExisting.
	Nodes []Node
	State string
	// Witness: this member votes but never stays primary.
	Witness bool
	// Secret is the cluster secret the members' calls to each other carry.
	Secret string
	// HTTPClient is what the members call each other with (nil:
	// HTTPClient(CA)).
	HTTPClient *http.Client
	CA         *x509.Certificate
	// Store is the store's configuration; the member fills in, at each
	// open, its event broker (sized by Events; Clock when Events has
	// none), whether it joins and the cluster's voters, and clears the raft
	// transport standalone.
	Store  store.Config
	Events events.Config
	// BackupDir is where a standalone member whose store cannot be read
	// finds the backup to restore; Boot is the boot report that says so.
	BackupDir string
	Boot      *managerv1.BootReport
	// Audit stamps a command made on behalf of the API call in ctx.
	Audit func(ctx context.Context, cmd *storev1.Command) *storev1.AuditStamp
	// ObserveCommit, if set, observes how long each commit on this member
	// as the primary took.
	ObserveCommit func(time.Duration)
	// CaughtUp is called once per store the member opens, the first time
	// that store has applied what the cluster had committed (the audit
	// chain's check).
	CaughtUp func(st *store.Store)
	// Work is the primary's work.
	Work  TermWork
	Clock clock.Clock
	Log   *slog.Logger
}

// Member is one Manager member's life in its cluster: its store and the
// store's replacements (recoveries), the primary terms it runs, joining,
// promotion and generations, passing writes and reads to the primary, and
// the membership calls. The rest of the daemon reads the store through
// Store, and writes through Apply.
type Member struct {
	cfg    Config
	log    *slog.Logger
	events *Events
	// storeRef is the member's store; a recovery (ForceStandalone,
	// LeaveQuorum, a stale generation) replaces it while the API keeps
	// serving.
	storeRef atomic.Pointer[store.Store]
	clients  clients
	// planes is the cluster's list of norsk-mgr URLs the primary tells its
	// workers (control_planes.go); planesPoke asks for a refresh.
	planes     nodes.ControlPlaneList
	planesPoke chan struct{}

	mu sync.Mutex
	// restart asks Run to replace the store (a recovery).
	restart chan func() error
	// termReady is closed when the first primary term's boot work is done
	// (or failed, termErr).
	termReady chan struct{}
	termOnce  sync.Once
	termErr   error
	// verified: CaughtUp has run for the current store.
	verified bool
	// announce is the norsk-mgr announcement this member received.
	announce announcement
	// primaryReady: this member leads and has confirmed that no member is
	// at a newer generation; writes wait for it (a former member that comes
	// back after a forced recovery must not acknowledge a write it will
	// discard).
	primaryReady atomic.Bool
	// knownGen is the newest generation seen (generationFile).
	knownGen atomic.Uint64
	// terms ends every primary term, now and to come: Stop cancels it
	// before the API stops serving, so the AutoManager and the node
	// controller stop while the API still answers, instead of meeting a
	// closed API and acting on the refusals (a migration aborted because
	// its notify found the listener gone).
	terms     context.Context
	stopTerms context.CancelFunc
	// termsRunning counts the primary terms under way (Stop waits).
	termsRunning sync.WaitGroup
}

// New makes a member from cfg; Open opens its store, Run runs it.
func New(cfg Config) *Member {
	m := &Member{
		cfg:        cfg,
		log:        cfg.Log,
		events:     OpenEvents(cfg.DataDir, cfg.Clock, cfg.Log),
		restart:    make(chan func() error, 1),
		termReady:  make(chan struct{}),
		planesPoke: make(chan struct{}, 1),
	}
	m.terms, m.stopTerms = context.WithCancel(context.Background())
	m.loadGeneration()
	return m
}

// Clustered reports whether the member runs in a cluster (not standalone).
func (m *Member) Clustered() bool { return len(m.cfg.Nodes) > 0 }

// FindNode is the entry of nodes named name.
func FindNode(nodes []Node, name string) (Node, bool) {
	for _, n := range nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// Store is the member's current store (nil while a recovery replaces it,
// or before Open).
func (m *Member) Store() *store.Store { return m.storeRef.Load() }

// Events is the member's cluster-event log.
func (m *Member) Events() *Events { return m.events }

// ControlPlanes is the list of norsk-mgr URLs the primary tells its
// workers, kept current during each primary term.
func (m *Member) ControlPlanes() *nodes.ControlPlaneList { return &m.planes }

// Ready is closed once the first primary term's boot work is done (or has
// failed: ReadyErr).
func (m *Member) Ready() <-chan struct{} { return m.termReady }

// ReadyErr is the first primary term's boot work's error, once Ready.
func (m *Member) ReadyErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.termErr
}

func (m *Member) termDone(err error) {
	m.termOnce.Do(func() {
		m.mu.Lock()
		m.termErr = err
		m.mu.Unlock()
		close(m.termReady)
	})
}

// IsPrimaryReady reports whether this member is the primary and has
// finished taking over (a standalone member: it leads).
func (m *Member) IsPrimaryReady() bool {
	st := m.Store()
	if st == nil || !st.IsLeader() {
		return false
	}
	return !m.Clustered() || m.primaryReady.Load()
}

// Stop ends the member's primary role: a primary in a cluster hands it to
// another full member first (the cluster changes primary in milliseconds
// instead of waiting out an election timeout once this member has gone);
// then the primary term under way, and every later one, ends, and Stop
// waits (within ctx) for the term's work to stop. The store stays open.
func (m *Member) Stop(ctx context.Context) {
	if st := m.Store(); m.Clustered() && st != nil && st.IsLeader() {
		if err := m.handOff(ctx, st, "this member is stopping"); err != nil {
			m.log.Warn("stopping without handing the primary role over", "err", err)
		}
	}
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

// Close closes the store and the event log; Run must have returned.
func (m *Member) Close() error {
	var err error
	if st := m.Store(); st != nil {
		err = st.Close()
	}
	m.events.Close()
	return err
}

// startTerm counts a primary term about to start, unless terms have been
// ended (Stop).
func (m *Member) startTerm() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.terms.Err() != nil {
		return false
	}
	m.termsRunning.Add(1)
	return true
}

// loadGeneration reads generationFile.
func (m *Member) loadGeneration() {
	b, err := os.ReadFile(filepath.Join(m.cfg.DataDir, generationFile))
	if err != nil {
		return
	}
	if g, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
		m.knownGen.Store(g)
	}
}

// noteGeneration records the generation st has applied if it is newer.
func (m *Member) noteGeneration(st *store.Store) {
	g := st.State().Snapshot().Generation()
	if g <= m.knownGen.Load() {
		return
	}
	if err := atomicfile.WriteFile(filepath.Join(m.cfg.DataDir, generationFile), []byte(strconv.FormatUint(g, 10)+"\n"), 0o600); err != nil {
		m.log.Warn("could not record the cluster generation", "err", err)
		return
	}
	m.knownGen.Store(g)
}

// generation is the generation of this member's copy: what it has applied,
// or what it last saw applied before a restart; 0 for an empty copy.
func (m *Member) generation(st *store.Store) uint64 {
	if st.LastIndex() == 0 {
		return 0
	}
	g := max(st.State().Snapshot().Generation(), m.knownGen.Load())
	return max(g, 1) // a copy with entries is at least at the first
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
	// forcedMarker holds the generation a forced recovery moves to (and
	// who asked) until the recovered member, leading alone, has committed
	// it. A crash in between finishes the job at the next boot.
	forcedMarker = "FORCED-STANDALONE"
)

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
