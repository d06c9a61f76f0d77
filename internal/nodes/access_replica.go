package nodes

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// actAccessReplica is the kind of an AccessReplicaUpdate message (acks,
// metrics). Out of the instance commands' range.
const actAccessReplica actionKind = 101

// syncAccessReplica sends the worker the stored access replica (the
// publication as the Manager verified and stored it) with the trusted keys'
// JWKS, when this session has not sent that replica yet: after the hello,
// and whenever a publication changes it (a new version, or an attestation).
// It adds the replica's watch to ws, so that the session wakes on a change.
// Without configured keys nothing is sent: a worker could not verify it.
func (cn *conn) syncAccessReplica(stream controllerSender, s *sessionState, r *state.Read, ws memdb.WatchSet) error {
	jwks := cn.c.cfg.AccessReplicaJWKS
	rep := r.AccessReplicaWatch(ws)
	// The store's values are immutable: a new pointer is a new write.
	if rep == nil || rep == s.access || jwks == "" {
		return nil
	}
	s.seq++
	msg := &managerv1.ControllerMessage{Seq: s.seq, Msg: &managerv1.ControllerMessage_AccessReplica{AccessReplica: &managerv1.AccessReplicaUpdate{
		Publication: rep.GetPublication(), TrustedJwks: jwks,
	}}}
	if err := stream.Send(msg); err != nil {
		return fmt.Errorf("send %s: %w", actAccessReplica, err)
	}
	s.access = rep
	s.seqKind[s.seq] = actAccessReplica
	if m := cn.c.cfg.Metrics; m != nil {
		m.CommandsSent.WithLabelValues(actAccessReplica.String()).Inc()
	}
	cn.log.Debug("access replica sent", "version", rep.GetVersion())
	return nil
}
