package nodes

import (
	"fmt"
	"slices"
	"sync"

	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// actControlPlanes is the kind of a ControlPlanes message (acks, metrics).
// Out of the instance commands' range.
const actControlPlanes actionKind = 102

// ControlPlaneList is the cluster's list of norsk-mgr URLs that every worker
// is told: in its hello and, whenever the list changes, in a ControlPlanes
// message. The Manager sets it (from every member's AnnounceControlPlane);
// the controller's sessions watch it. The zero value is an empty list, safe
// for concurrent use.
type ControlPlaneList struct {
	mu      sync.Mutex
	urls    []string
	changed chan struct{} // closed (and replaced) by a Set that changes urls
}

// Set replaces the list and reports whether it changed. urls is copied.
func (l *ControlPlaneList) Set(urls []string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if slices.Equal(l.urls, urls) {
		return false
	}
	l.urls = slices.Clone(urls)
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	return true
}

// Get returns the list (the caller must not modify it) and a channel that is
// closed at its next change.
func (l *ControlPlaneList) Get() ([]string, <-chan struct{}) {
	if l == nil {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.urls, l.changed
}

// syncControlPlanes sends the worker the list of norsk-mgr URLs when it
// differs from what this session last told it (the hello included), and
// adds the list's change channel to ws so that the session wakes on a
// change.
func (cn *conn) syncControlPlanes(stream controllerSender, s *sessionState, ws memdb.WatchSet) error {
	urls, ch := cn.c.cfg.ControlPlanes.Get()
	if ch != nil {
		ws.Add(ch)
	}
	if slices.Equal(urls, s.controlPlanes) {
		return nil
	}
	s.seq++
	msg := &managerv1.ControllerMessage{Seq: s.seq, Msg: &managerv1.ControllerMessage_ControlPlanes{ControlPlanes: &managerv1.ControlPlanes{
		Urls: slices.Clone(urls),
	}}}
	if err := stream.Send(msg); err != nil {
		return fmt.Errorf("send %s: %w", actControlPlanes, err)
	}
	s.controlPlanes = slices.Clone(urls)
	s.seqKind[s.seq] = actControlPlanes
	if m := cn.c.cfg.Metrics; m != nil {
		m.CommandsSent.WithLabelValues(actControlPlanes.String()).Inc()
	}
	cn.log.Debug("norsk-mgr URLs sent", "urls", urls)
	return nil
}
