package manager

import (
	"context"
	"slices"
	"strings"
	"time"
)

// controlPlanesEvery is how often the primary re-reads every member's
// norsk-mgr announcement (a member's own announcement refreshes at once).
const controlPlanesEvery = time.Second

// pokeControlPlanes asks the primary's refresh loop to re-read the
// announcements now (this member's norsk-mgr has just announced).
func (s *Server) pokeControlPlanes() {
	select {
	case s.planesPoke <- struct{}{}:
	default:
	}
}

// runControlPlanes keeps s.controlPlanes — the norsk-mgr URLs the node
// controller tells every worker — equal to the cluster's fresh
// announcements, for the primary's term: at once, on every announcement to
// this member, and every controlPlanesEvery for the other members' (asked
// with the same status call GetClusterStatus makes).
func (s *Server) runControlPlanes(ctx context.Context) {
	t := time.NewTicker(controlPlanesEvery)
	defer t.Stop()
	for {
		if urls := s.freshControlPlanes(ctx); ctx.Err() == nil && s.controlPlanes.Set(urls) {
			s.log.Info("norsk-mgr URLs told to workers", "urls", urls)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.planesPoke:
		}
	}
}

// freshControlPlanes is every member's announced norsk-mgr URL that is not
// stale, ordered by member name, each once. A member that cannot be asked
// counts as one without an announcement.
func (s *Server) freshControlPlanes(ctx context.Context) []string {
	type named struct{ member, url string }
	var all []named
	if a, stale := s.member.controlPlane(s.cfg.Clock.Now()); a.url != "" && !stale {
		all = append(all, named{s.cfg.NodeName, a.url})
	}
	if s.cfg.clustered() {
		for _, p := range s.peerStatuses(ctx) {
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
