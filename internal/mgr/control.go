package mgr

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// LeaseKey holds the active norsk-mgr's lease in rolestore.Namespace.
const LeaseKey = "lease"

// leaseDoc is the lease: which member's norsk-mgr is active, since when.
// It is never renewed by writing: the holder's liveness is its member's
// announcement (AnnounceControlPlane), which the member reports stale after
// three intervals without one.
type leaseDoc struct {
	Member string    `json:"member"`
	URL    string    `json:"url"`
	Since  time.Time `json:"since"`
	// Takeover says from whom, and why, when the lease was taken over.
	Takeover string `json:"takeover,omitempty"`
}

// leaseState is what this norsk-mgr knows of the lease.
type leaseState struct {
	mu       sync.Mutex
	doc      *leaseDoc
	revision uint64
	isActive bool
	// unreachableSince: since when the holder could not be judged (its
	// member unreachable, or no announcement there).
	unreachableSince time.Time
	lastErr          string
}

func (l *leaseState) active() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.isActive
}

func (l *leaseState) snapshot() (doc *leaseDoc, active bool, lastErr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.doc != nil {
		d := *l.doc
		doc = &d
	}
	return doc, l.isActive, l.lastErr
}

// runControl is the announce-and-lease loop: every interval it announces
// this norsk-mgr to its member, reads the lease, takes it over when the
// holder is stale (compare-and-set on the revision read, so two standbys
// never both win), and — while active — publishes.
func (s *Server) runControl(ctx context.Context) {
	s.goRun(func() { s.runAnnounce(ctx) })
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.controlOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// runAnnounce announces this norsk-mgr to its member every interval, on its
// own: a slow publication never makes the active one look stale.
func (s *Server) runAnnounce(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, max(s.cfg.Interval, time.Second))
		if err := s.m.AnnounceControlPlane(cctx, s.url, s.cfg.Interval); err != nil && ctx.Err() == nil {
			s.log.Warn("cannot announce to the member", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) controlOnce(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, max(3*s.cfg.Interval, 5*time.Second))
	defer cancel()
	before, _, _ := s.lease.snapshot()
	active, err := s.checkLease(cctx)
	after, _, _ := s.lease.snapshot()
	if before != nil && after != nil && before.Member != after.Member {
		s.hub.publish(change{Kind: "control"}) // another holder: the pages say so
	}
	s.lease.mu.Lock()
	was := s.lease.isActive
	s.lease.isActive = active
	s.lease.lastErr = ""
	if err != nil {
		s.lease.lastErr = err.Error()
	}
	s.lease.mu.Unlock()
	if err != nil {
		s.log.Warn("lease check", "err", err)
	}
	if active != was {
		if active {
			s.log.Info("this norsk-mgr is now the active one: it publishes")
		} else {
			s.log.Info("this norsk-mgr is now a standby")
		}
		s.hub.publish(change{Kind: "control"})
	}
	if active {
		s.publish(cctx, !was)
	}
}

// checkLease reads the lease and takes it when it is free or its holder is
// stale. It reports whether this norsk-mgr holds it.
func (s *Server) checkLease(ctx context.Context) (bool, error) {
	e, err := s.m.KvGet(norsk.Linearizable(ctx), rolestore.Namespace, LeaseKey)
	if err != nil && !errors.Is(err, norsk.ErrNotFound) {
		return false, err
	}
	var doc *leaseDoc
	var rev uint64
	if err == nil { // absent: free
		doc = &leaseDoc{}
		if err := json.Unmarshal(e.GetValue(), doc); err != nil {
			doc = nil // unreadable: take it over
		}
		rev = e.GetRevision()
	}
	s.lease.mu.Lock()
	s.lease.doc, s.lease.revision = doc, rev
	s.lease.mu.Unlock()
	if doc != nil && doc.Member == s.member {
		if doc.URL != s.url {
			// This member's norsk-mgr restarted elsewhere: keep the lease, fix the URL.
			return s.takeLease(ctx, rev, "", doc)
		}
		return true, nil
	}
	why := ""
	switch {
	case e == nil:
		why = "no norsk-mgr held the lease"
	case doc == nil:
		why = "the lease was unreadable"
	default:
		stale, reason, err := s.holderStale(ctx, doc)
		if err != nil {
			return false, err
		}
		if !stale {
			return false, nil
		}
		why = reason
	}
	return s.takeLease(ctx, rev, why, doc)
}

// holderStale asks the cluster whether the lease holder's norsk-mgr is
// stale: its member reports its announcement stale, it announces another
// URL (it restarted and lost the lease), its member is gone, or the member
// could not be asked for three intervals.
func (s *Server) holderStale(ctx context.Context, doc *leaseDoc) (bool, string, error) {
	st, err := s.m.GetClusterStatus(ctx)
	if err != nil {
		return false, "", err
	}
	for _, mb := range st.GetMembers() {
		if mb.GetName() != doc.Member {
			continue
		}
		switch {
		case !mb.GetReachable():
			return s.suspect("the active norsk-mgr's member " + doc.Member + " cannot be reached")
		case mb.GetControlPlaneUrl() == "":
			// Not announced yet (it has just started) or the member
			// restarted: stale only if it stays so for three intervals.
			return s.suspect("member " + doc.Member + " has had no norsk-mgr announced for three intervals")
		case mb.GetControlPlaneStale():
			return true, "the active norsk-mgr (" + doc.Member + ", " + mb.GetControlPlaneUrl() + ") is stale", nil
		}
		s.lease.mu.Lock()
		s.lease.unreachableSince = time.Time{}
		s.lease.mu.Unlock()
		return false, "", nil
	}
	return true, "the active norsk-mgr's member " + doc.Member + " is no longer in the cluster", nil
}

// suspect counts a holder that cannot be judged (its member unreachable,
// or no announcement there): stale once that has lasted three intervals.
func (s *Server) suspect(why string) (bool, string, error) {
	s.lease.mu.Lock()
	defer s.lease.mu.Unlock()
	if s.lease.unreachableSince.IsZero() {
		s.lease.unreachableSince = time.Now()
	}
	if time.Since(s.lease.unreachableSince) > 3*s.cfg.Interval {
		s.lease.unreachableSince = time.Time{}
		return true, why, nil
	}
	return false, "", nil
}

// takeLease writes the lease for this norsk-mgr, conditional on the
// revision read (0: absent). Losing the race is not an error.
func (s *Server) takeLease(ctx context.Context, rev uint64, why string, prev *leaseDoc) (bool, error) {
	doc := leaseDoc{Member: s.member, URL: s.url, Since: time.Now().UTC(), Takeover: why}
	if prev != nil && prev.Member == s.member {
		doc.Since, doc.Takeover = prev.Since, prev.Takeover
	}
	b, _ := json.Marshal(doc)
	_, err := s.m.KvCommit(ctx, rolestore.Namespace, []norsk.KvWrite{norsk.KvPut(LeaseKey, b).IfRevision(rev)}, norsk.KvCommitOptions{})
	if errors.Is(err, norsk.ErrFailedPrecondition) {
		return false, nil // another norsk-mgr took it first
	}
	if err != nil {
		return false, err
	}
	if why != "" {
		from := ""
		if prev != nil {
			from = prev.Member
		}
		s.log.Info("took the lease", "from", from, "why", why)
		s.audit(ctx, "", "lease-taken", map[string]any{"member": s.member, "url": s.url, "from": from, "why": why})
	}
	s.lease.mu.Lock()
	s.lease.doc = &doc
	s.lease.mu.Unlock()
	return true, nil
}

// audit appends one of norsk-mgr's own entries (sign-ins, actions, lease
// takeovers) to the Manager's audit log; user is the console user ("" for
// norsk-mgr itself). A failure is logged, never fatal.
func (s *Server) audit(ctx context.Context, user, kind string, fields map[string]any) {
	if fields == nil {
		fields = map[string]any{}
	}
	fields["norskMgr"] = s.member
	if user != "" {
		fields["user"] = user
	}
	b, _ := json.Marshal(fields)
	if _, err := s.m.AppendAuditEntry(context.WithoutCancel(ctx), AuditSource, kind, string(b)); err != nil {
		s.log.Warn("cannot append an audit entry", "kind", kind, "err", err)
	}
}
