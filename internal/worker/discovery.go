package worker

import (
	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/worker/ack"
	"github.com/norsk-go/norsk-manager/pkg/discovery"
)

// DiscoveryAccess is the node's access to the discovery fleet as the Manager
// last sent it (kept across restarts in DataDir/discovery.json): every
// replica address, the leaf token and the node's token. Nil when none has
// been received. The caller may modify the copy returned.
func (a *Agent) DiscoveryAccess() *managerv1.DiscoveryAccess { return a.disco.Get() }

// loadDiscovery reads the access an earlier run kept. A missing or unusable
// file is not an error: the Manager sends the access after every hello.
func (a *Agent) loadDiscovery() {
	a.disco.Dir = a.cfg.DataDir
	if err := a.disco.Load(a.NodeID()); err != nil {
		a.logger().Warn("ignoring the kept discovery access", "err", err)
	}
}

// onDiscoveryAccess takes a DiscoveryAccess command: it keeps the access in
// memory and on disk, then acknowledges it. A node token minted for another
// node is refused. Neither token is ever logged.
func (a *Agent) onDiscoveryAccess(sess *session, seq uint64, acc *managerv1.DiscoveryAccess) {
	if acc == nil || acc.GetNodeToken() == "" {
		sess.enqueue(ack.Message(seq, ack.Refuse(connect.CodeInvalidArgument, "the discovery access carries no node token")))
		return
	}
	if id, _, err := discovery.ParseNodeToken(acc.GetNodeToken()); err != nil || id != a.NodeID() {
		sess.enqueue(ack.Message(seq, ack.Refuse(connect.CodeInvalidArgument, "the discovery access's node token is not this node's")))
		return
	}
	if err := a.disco.Keep(acc, a.clock.Now()); err != nil {
		a.logger().Error("cannot keep the discovery access", "err", err)
		sess.enqueue(ack.Message(seq, ack.Refuse(connect.CodeInternal, "the discovery access is in force but could not be kept: %s", err)))
		return
	}
	a.logger().Info("discovery access received", "addresses", len(acc.GetAddresses()))
	sess.enqueue(ack.Message(seq, nil))
}

// forgetDiscovery removes the kept access (the node was deregistered).
func (a *Agent) forgetDiscovery() {
	if err := a.disco.Forget(); err != nil {
		a.logger().Error("cannot delete the discovery access", "err", err)
	}
}
