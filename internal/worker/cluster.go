package worker

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/datadir"
)

// Ownership and sessions (decision 0027).
//
// A worker process has an incarnation, made at random when its Agent is
// made: the Manager accepts one live stream per node identity and refuses
// the registration of another incarnation while that stream lives.
//
// A worker belongs to one cluster: the cluster id of its Manager's store,
// which the registration answer and every hello carry. It is kept in the
// identity, given to the runtime (which labels everything it creates with
// it and touches only what carries it, or carries none), and a Manager of
// another cluster is refused.

// newIncarnation makes a worker process's incarnation: 16 random hex digits.
func newIncarnation() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// errOtherCluster is a Manager that says it is another cluster than the one
// this worker belongs to.
type errOtherCluster struct{ mine, theirs string }

func (e *errOtherCluster) Error() string {
	return fmt.Sprintf("this worker's node belongs to cluster %s, and the Manager says it is cluster %s; "+
		"a worker never follows (nor touches the containers of) another cluster — register it anew with a fresh data directory if the Manager's store was replaced",
		e.mine, e.theirs)
}

// ClusterID is the cluster the worker belongs to ("" until a Manager with
// one has said so).
func (a *Agent) ClusterID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.id == nil {
		return ""
	}
	return a.id.ClusterID
}

// learnCluster takes the cluster id a Manager gave (a registration answer
// or a hello). "" (a Manager older than cluster ids) changes nothing; the
// first one is kept in the identity and given to the runtime; another than
// the one kept is an *errOtherCluster.
func (a *Agent) learnCluster(clusterID string) error {
	if clusterID == "" {
		return nil
	}
	a.mu.Lock()
	if a.id == nil {
		a.mu.Unlock()
		return nil // the first registration: Run keeps it with the identity
	}
	switch a.id.ClusterID {
	case clusterID:
		a.mu.Unlock()
		return nil
	case "":
	default:
		mine := a.id.ClusterID
		a.mu.Unlock()
		return &errOtherCluster{mine: mine, theirs: clusterID}
	}
	id := *a.id
	id.ClusterID = clusterID
	if err := datadir.SaveIdentity(a.cfg.DataDir, &id); err != nil {
		a.mu.Unlock()
		return fmt.Errorf("remember the cluster id: %w", err)
	}
	a.id = &id
	log := a.log
	a.mu.Unlock()
	if a.rt != nil {
		if err := a.rt.SetClusterID(clusterID); err != nil {
			return err
		}
	}
	log.Info("this worker now knows its cluster: everything it creates is labelled with it", "cluster_id", clusterID)
	return nil
}

// maxPendingNotices bounds the notices kept while no stream is up; older
// ones are dropped (they were logged).
const maxPendingNotices = 1024

// notify sends a notice of something the worker did, or left alone, that no
// command asked for: on the current stream, or on the next one (kept until
// then). It is logged as well.
func (a *Agent) notify(key runtime.Key, token uint64, kind, message string) {
	a.logger().Warn("notice for the job's history", "instance", key.String(), "token", token, "kind", kind, "message", message)
	msg := &managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Notice{Notice: &managerv1.WorkerNotice{
		JobId: key.JobID, Role: key.Role, FencingToken: token, Kind: kind, Message: message,
	}}}
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	if a.cur != nil && a.cur.ctx.Err() == nil {
		a.cur.enqueue(msg)
		return
	}
	a.keepNoticeLocked(msg)
}

// keepNoticeLocked keeps a notice for the next stream (also one a stream
// that ended had not sent: rescueMigrationReportsLocked); pubMu held.
func (a *Agent) keepNoticeLocked(msg *managerv1.WorkerMessage) {
	if len(a.noticesPending) >= maxPendingNotices {
		a.noticesPending[0] = nil
		a.noticesPending = a.noticesPending[1:]
	}
	a.noticesPending = append(a.noticesPending, msg)
}

// flushNoticesLocked queues the kept notices on a new stream; pubMu held.
func (a *Agent) flushNoticesLocked(s *session) {
	for _, m := range a.noticesPending {
		s.enqueue(m)
	}
	a.noticesPending = nil
}

// Incarnation is this worker process's incarnation (made at New).
func (a *Agent) Incarnation() string { return a.incarnation }
