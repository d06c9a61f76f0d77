package nodes

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/discovery"
)

// actDiscovery is the kind of a DiscoveryAccess message (acks, metrics). Out
// of the instance commands' range.
const actDiscovery actionKind = 100

// discoveryState is what one session has sent of the node's discovery
// access.
type discoveryState struct {
	// fleet is the fleet record the access was last computed from (the
	// store's immutable value: the same pointer until it changes).
	fleet *managerv1.DiscoveryFleet
	// sent is the access last sent on this stream.
	sent *managerv1.DiscoveryAccess
}

// controllerSender is the sending side of a Control stream.
type controllerSender interface {
	Send(*managerv1.ControllerMessage) error
}

// syncDiscovery sends the node its discovery access (every replica address,
// the leaf token and its node token minted from the tier secret that mints
// now) when it differs from what this session last sent: after the hello,
// when a fleet is published or its addresses change, and after a
// rotation's flip. It adds the fleet's watch to ws, so that the session
// wakes on a change. The tier secret is never sent, and nothing of the
// access is logged but its shape.
func (cn *conn) syncDiscovery(stream controllerSender, s *sessionState, r *state.Read, ws memdb.WatchSet) error {
	fleet := r.DiscoveryFleetWatch(ws)
	if fleet == nil || fleet == s.disco.fleet {
		return nil
	}
	acc := discovery.Access(fleet, cn.nodeID)
	if acc == nil || proto.Equal(acc, s.disco.sent) {
		s.disco.fleet = fleet
		return nil
	}
	s.seq++
	msg := &managerv1.ControllerMessage{Seq: s.seq, Msg: &managerv1.ControllerMessage_DiscoveryAccess{DiscoveryAccess: acc}}
	if err := stream.Send(msg); err != nil {
		return fmt.Errorf("send %s: %w", actDiscovery, err)
	}
	s.disco.fleet, s.disco.sent = fleet, acc
	s.seqKind[s.seq] = actDiscovery
	if m := cn.c.cfg.Metrics; m != nil {
		m.CommandsSent.WithLabelValues(actDiscovery.String()).Inc()
	}
	cn.log.Debug("discovery access sent", "addresses", len(acc.GetAddresses()), "rotation", fleet.GetRotationPhase())
	return nil
}
