package state

import (
	"github.com/hashicorp/go-memdb"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// AccessReplicaWatch is AccessReplica that also adds the replica's watch
// channel to ws (may be nil), so a caller (the node controller) can block
// until a publication changes it. The state returned must not be modified.
func (r *Read) AccessReplicaWatch(ws memdb.WatchSet) *storev1.AccessReplicaState {
	if raw := r.first(ws, tableSingletons, "id", singletonAccess); raw != nil {
		return raw.(*singleton).Msg.(*storev1.AccessReplicaState)
	}
	return nil
}
