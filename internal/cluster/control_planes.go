package cluster

import (
	"context"
	"slices"
	"strings"
	"time"
)

// controlPlanesEvery is how often the primary re-reads every member's
// norsk-mgr announcement (a member's own announcement refreshes at once).
const controlPlanesEvery = time.Second

// announcement is a norsk-mgr's AnnounceControlPlane, answered locally.
type announcement struct {
	url      string
	interval time.Duration
	at       time.Time
}

// controlPlane is this member's announcement and whether it is stale
// (three intervals without one; never without an interval).
func (m *Member) controlPlane(now time.Time) (a announcement, stale bool) {
	m.mu.Lock()
	a = m.announce
	m.mu.Unlock()
	return a, a.url != "" && a.interval > 0 && now.Sub(a.at) > 3*a.interval
}

// pokeControlPlanes asks the primary's refresh loop to re-read the
// announcements now (this member's norsk-mgr has just announced).
func (m *Member) pokeControlPlanes() {
	select {
	case m.planesPoke <- struct{}{}:
	default:
	}
}

// runControlPlanes keeps m.planes — the norsk-mgr URLs the node
// controller tells every worker — equal to the cluster's fresh
// announcements, for the primary's term: at once, on every announcement to
// this member, and every controlPlanesEvery for the other members' (asked
// with the same status call GetClusterStatus makes).
func (m *Member) runControlPlanes(ctx context.Context) {
	t := time.NewTicker(controlPlanesEvery)
	defer t.Stop()
	for {
		if urls := m.freshControlPlanes(ctx); ctx.Err() == nil && m.planes.Set(urls) {
			m.log.Info("norsk-mgr URLs told to workers", "urls", urls)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.planesPoke:
		}
	}
}

// freshControlPlanes is every member's announced norsk-mgr URL that is not
// stale, ordered by member name, each once. A member that cannot be asked
// counts as one without an announcement.
func (m *Member) freshControlPlanes(ctx context.Context) []string {
	type named struct{ member, url string }
	var all []named
	if a, stale := m.controlPlane(m.cfg.Clock.Now()); a.url != "" && !stale {
		all = append(all, named{m.cfg.Name, a.url})
	}
	if m.Clustered() {
		for _, p := range m.peerStatuses(ctx) {
			if p.err == nil && p.status.GetControlPlaneUrl() != "" && !p.status.GetControlPlaneStale() {
				all = append(all, named{p.name, p.status.GetControlPlaneUrl()})
			}
		}
	}
	slices.SortFunc(all, func(a, b named) int { return strings.Compare(a.member, b.member) })
	urls := []string{}
	for _, n := range all {
		if !slices.Contains(urls, n.url) {
			urls = append(urls, n.url)
		}
	}
	return urls
}
