package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// Run is the member's main loop, until ctx ends: it runs a primary term
// whenever this member leads, calls CaughtUp once caught up, keeps a
// cluster member joined and current, and replaces the store when a
// recovery asks. Open must have succeeded.
func (m *Member) Run(ctx context.Context) {
	for {
		done := m.runIncarnation(ctx)
		select {
		case <-ctx.Done():
			return
		case fn := <-done:
			if err := m.replaceStore(ctx, fn); err != nil {
				m.log.Error("recovery failed; the member keeps its old store closed and retries in 5s", "err", err)
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
func (m *Member) runIncarnation(ctx context.Context) <-chan func() error {
	st := m.Store()
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

// requestRestart asks Run to close the store, run fn, and open it again.
// With fn nil (LeaveQuorum) the current incarnation's loops stop and the
// store stays as it is, a follower, until the next boot discards it.
func (m *Member) requestRestart(fn func() error) bool {
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
func (m *Member) replaceStore(ctx context.Context, fn func() error) error {
	old := m.Store()
	old.Broker().Close()
	if err := old.Close(); err != nil {
		m.log.Warn("closing the store for a recovery", "err", err)
	}
	if fn != nil {
		if err := fn(); err != nil {
			if rerr := m.Open(ctx); rerr != nil {
				return fmt.Errorf("%w; and reopening: %v", err, rerr)
			}
			return err
		}
	}
	m.mu.Lock()
	m.verified = false
	m.mu.Unlock()
	return m.Open(ctx)
}

// leadership runs a primary term each time this member leads.
func (m *Member) leadership(ctx context.Context, st *store.Store) {
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
		if ctx.Err() != nil {
			// The incarnation ended while this loop was awake for another
			// reason (a tick, a leader notice): a term that ended with it
			// must not be followed by a fresh one on the store being
			// closed.
			return
		}
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

// primaryTerm is what the primary does while it leads: finish the boot work
// the store needs (schema, membership, the bootstrap token), then run the
// term's work and keep the workers' norsk-mgr list until the term ends.
func (m *Member) primaryTerm(ctx context.Context, st *store.Store) {
	if m.cfg.Witness {
		m.handOver(ctx, st)
		return
	}
	if err := st.Barrier(); err != nil {
		m.log.Warn("primary term: barrier", "err", err)
		m.termDone(err)
		return
	}
	if m.Clustered() && m.newerGeneration(ctx, st, 300*time.Millisecond) {
		return
	}
	err := m.bootWork(ctx, st)
	m.termDone(err)
	if err != nil {
		m.log.Error("primary term: boot work failed", "err", err)
		return
	}
	if ctx.Err() != nil {
		return // the term ended during its boot work
	}
	m.primaryReady.Store(true)
	stop := m.cfg.Work.Start(ctx, Term{Store: st, Term: st.Term(), Generation: st.State().Snapshot().Generation()})
	m.runControlPlanes(ctx)
	stop()
}

// handOver is a witness's term: it votes, so it can be elected, but it
// never stays primary. It hands the role to a full member it can reach,
// trying each in turn until one takes it or the term ends.
func (m *Member) handOver(ctx context.Context, st *store.Store) {
	m.log.Info("this witness was elected; handing the primary role to a full member")
	why := "a witness was elected"
	for ctx.Err() == nil && st.IsLeader() {
		if m.handOff(ctx, st, why) == nil {
			return
		}
		why = "" // recorded once
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// NewClusterID makes a cluster id: 32 random hex digits. The boot work
// stamps it into the InitCluster command that bootstraps a store.
func NewClusterID() string { return auth.RandomToken("", 16) }

// bootWork brings the store to this binary's needs; only the primary writes.
func (m *Member) bootWork(ctx context.Context, st *store.Store) error {
	if err := m.cfg.Work.Prepare(ctx, st); err != nil {
		return err
	}
	r := st.State().Snapshot()
	if r.Generation() == 0 {
		members := []*storev1.MemberRecord{{Name: m.cfg.Name, RaftAddress: st.Addr(), ApiUrl: m.cfg.URL, Status: state.MemberJoined}}
		if m.Clustered() {
			members = nil
			for _, n := range m.cfg.Nodes {
				members = append(members, &storev1.MemberRecord{Name: n.Name, RaftAddress: n.Raft, ApiUrl: n.API, Witness: n.Witness, Status: state.MemberJoined})
			}
		}
		if _, err := st.Apply(ctx, &storev1.Command{
			Time: timestamppb.New(m.cfg.Clock.Now()),
			Cmd:  &storev1.Command_InitCluster{InitCluster: &storev1.InitCluster{Members: members, ClusterId: NewClusterID()}},
		}); err != nil {
			return fmt.Errorf("record the cluster's members: %w", err)
		}
		m.log.Info("initialised the store", "cluster_id", st.State().Snapshot().ClusterID())
	} else if r.ClusterID() == "" {
		// A store initialised before cluster ids gets one, once (the FSM
		// keeps the first recorded).
		if _, err := st.Apply(ctx, &storev1.Command{
			Time: timestamppb.New(m.cfg.Clock.Now()),
			Cmd:  &storev1.Command_InitCluster{InitCluster: &storev1.InitCluster{ClusterId: NewClusterID()}},
		}); err != nil {
			return fmt.Errorf("record the cluster id: %w", err)
		}
		m.log.Info("this store had no cluster id; recorded one", "cluster_id", st.State().Snapshot().ClusterID())
	}
	// Keep this member's own addresses current in the membership.
	if me := st.State().Snapshot().Member(m.cfg.Name); me != nil && me.GetStatus() != state.MemberRetired &&
		(me.GetApiUrl() != m.cfg.URL || me.GetRaftAddress() != st.Addr()) {
		if _, err := st.Apply(ctx, &storev1.Command{
			Time: timestamppb.New(m.cfg.Clock.Now()),
			Cmd: &storev1.Command_MemberJoined{MemberJoined: &storev1.MemberJoined{
				Name: m.cfg.Name, RaftAddress: st.Addr(), ApiUrl: m.cfg.URL, Witness: m.cfg.Witness,
			}},
		}); err != nil {
			m.log.Warn("could not record this member's addresses", "err", err)
		}
	}
	if err := m.finishForced(ctx, st); err != nil {
		return err
	}
	if err := m.cfg.Work.Boot(ctx, st); err != nil {
		return err
	}
	m.verifyOnce(st)
	return nil
}

// verifyOnce calls CaughtUp the first time this member is caught up since
// its store was opened.
func (m *Member) verifyOnce(st *store.Store) {
	m.mu.Lock()
	done := m.verified
	m.verified = true
	m.mu.Unlock()
	if !done && m.cfg.CaughtUp != nil {
		m.cfg.CaughtUp(st)
	}
}

// keepCurrent, on every member: verify the audit chain once caught up; in a
// cluster, join when not yet a member and rejoin when the cluster moved on
// to a newer generation without us.
func (m *Member) keepCurrent(ctx context.Context, st *store.Store) {
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
		if !m.Clustered() {
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
func (m *Member) joined() {
	path := filepath.Join(m.cfg.DataDir, joinMarker)
	if _, err := os.Stat(path); err != nil {
		return
	}
	if err := os.Remove(path); err == nil {
		m.events.Record("member-joined", "this member holds the cluster's state again", 0, 0)
	}
}

// tryJoin asks each known member to add this one (whoever is asked passes
// the request to its primary).
func (m *Member) tryJoin(ctx context.Context, st *store.Store) {
	req := &managerv1.JoinRequest{Name: m.cfg.Name, RaftAddress: st.Addr(), ApiUrl: m.cfg.URL, Witness: m.cfg.Witness}
	for _, url := range m.peerURLs() {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := m.memberClient(url).Join(cctx, newMemberRequest(m, req))
		cancel()
		if err == nil {
			m.log.Info("asked the cluster to add this member", "via", url)
			return
		}
		m.log.Debug("join not accepted yet", "via", url, "err", err)
	}
}

// newerGeneration asks the other members (each answering within timeout)
// whether one is at a newer generation than this member's copy: then this
// copy is from before a forced recovery. It is put aside and the member
// rejoins as a follower — it never competes with the newer cluster. A
// primary checks at the start of each term (before it acknowledges a write)
// and every few seconds; a member without a primary checks too.
func (m *Member) newerGeneration(ctx context.Context, st *store.Store, timeout time.Duration) bool {
	mine := m.generation(st)
	if mine == 0 {
		return false // no copy yet: it is replicated to, or joins
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, p := range m.peerStatuses(cctx) {
		if p.err != nil || p.status.GetGeneration() <= mine {
			continue
		}
		reason := fmt.Sprintf("member %s is at generation %d (primary %s); this copy is at generation %d", p.name, p.status.GetGeneration(), orNone(p.status.GetLeader()), mine)
		m.log.Warn("this member's copy is from an older generation; putting it aside and rejoining", "why", reason)
		m.events.Record("rejoined", reason+": put this copy aside and rejoined as a follower", st.Term(), mine)
		m.requestRestart(func() error {
			moved, err := m.discardStore()
			if err == nil {
				m.log.Warn("the older copy was moved aside", "moved_to", moved)
			}
			return err
		})
		return true
	}
	return false
}
