package state

import (
	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// DiscoveryFleetWatch is DiscoveryFleet that also adds the fleet's watch
// channel to ws (may be nil), so a caller can block until a publish or a
// rotation step changes it. The fleet returned must not be modified.
func (r *Read) DiscoveryFleetWatch(ws memdb.WatchSet) *managerv1.DiscoveryFleet {
	if raw := r.first(ws, tableSingletons, "id", singletonDiscovery); raw != nil {
		return raw.(*singleton).Msg.(*managerv1.DiscoveryFleet)
	}
	return nil
}
