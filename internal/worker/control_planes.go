package worker

import (
	"slices"
	"sync"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
)

// controlPlanes is the cluster's list of norsk-mgr URLs as the Manager last
// told it (hello, then ControlPlanes on each change).
type controlPlanes struct {
	mu   sync.Mutex
	urls []string
	seen bool // a hello or ControlPlanes has set urls
}

// ControlPlanes returns the URLs of the cluster's norsk-mgr instances (the
// operator console, the discovery and role-store replicas), as the Manager
// primary last told them: at every hello and whenever the list changes.
// known is false until a Manager has told any. The caller may modify the
// slice returned.
func (a *Agent) ControlPlanes() (urls []string, known bool) {
	a.planes.mu.Lock()
	defer a.planes.mu.Unlock()
	return slices.Clone(a.planes.urls), a.planes.seen
}

// setControlPlanes records the list a hello or a ControlPlanes message
// carries.
func (a *Agent) setControlPlanes(urls []string) {
	a.planes.mu.Lock()
	changed := !a.planes.seen || !slices.Equal(a.planes.urls, urls)
	a.planes.urls, a.planes.seen = slices.Clone(urls), true
	a.planes.mu.Unlock()
	if changed {
		a.logger().Info("norsk-mgr URLs", "urls", urls)
	}
}

// onControlPlanes takes a ControlPlanes command and acknowledges it.
func (a *Agent) onControlPlanes(sess *session, seq uint64, m *managerv1.ControlPlanes) {
	a.setControlPlanes(m.GetUrls())
	sess.enqueue(ack.Message(seq, nil))
}
