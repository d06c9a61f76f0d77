package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/worker"
)

// node is one simulated worker: its identity, the instances it holds and
// its current Control stream.
type node struct {
	f           *Fleet
	address     string
	incarnation string
	born        time.Time // the origin of its monotonic heartbeat stamps

	mu     sync.Mutex
	id     string
	secret string
	// epoch is the newest primary that opened a stream; an older one is
	// refused.
	epoch worker.Epoch
	cur   *session
	// nextSession numbers the sessions (logs).
	nextSession uint64
	// refused is why the last hello this node refused was refused (""
	// none): a failover that leaves a node without a stream says it.
	refused string
	insts   map[instKey]*instance
	// fence is, per key, the newest token of an instance that stopped and
	// was forgotten: an older start is refused.
	fence map[instKey]uint64
}

// instKey is an instance's (job id, role).
type instKey struct{ job, role string }

func (k instKey) String() string { return k.job + "/" + k.role }

// instance is a simulated instance: a phase and nothing that runs.
type instance struct {
	token   uint64
	phase   managerv1.InstancePhase
	jobHash uint64
	reason  managerv1.StoppingReason
	addl    string
}

func newNode(f *Fleet, address string) *node {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &node{
		f:           f,
		address:     address,
		incarnation: "sim-" + hex.EncodeToString(b[:]),
		born:        time.Now(),
		insts:       map[instKey]*instance{},
		fence:       map[instKey]uint64{},
	}
}

func (n *node) setIdentity(id, secret string) {
	n.mu.Lock()
	n.id, n.secret = id, secret
	n.mu.Unlock()
}

func (n *node) nodeID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id
}

// errSuperseded refuses a hello from an older primary than one this node
// already follows.
var errSuperseded = errors.New("a newer Manager primary already holds this node's stream")

// open makes a new stream the node's current one (ending the previous) and
// queues its hello with the inventory.
func (n *node) open(ctx context.Context, e worker.Epoch) (*session, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e != (worker.Epoch{}) {
		if e.Before(n.epoch) {
			n.refused = fmt.Sprintf("a hello from generation %d term %d was refused: the node follows generation %d term %d", e.Generation, e.Term, n.epoch.Generation, n.epoch.Term)
			return nil, errSuperseded
		}
		n.epoch = e
	}
	if n.cur != nil {
		n.cur.cancel(errReplaced)
	} else {
		n.f.connected.Add(1)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	n.nextSession++
	s := &session{id: n.nextSession, ctx: sctx, cancel: cancel, wake: make(chan struct{}, 1)}
	n.cur = s
	hello := &managerv1.WorkerHello{
		NodeId:            n.id,
		Hardware:          n.f.hardware(),
		Runtime:           "process",
		WorkerVersion:     "norsk-sim",
		Inventory:         n.inventoryLocked(),
		WorkerIncarnation: n.incarnation,
	}
	s.enqueue(&managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Hello{Hello: hello}})
	n.f.hellos.Add(1)
	return s, nil
}

// close ends a session; the node has no stream until the next one opens.
func (n *node) close(s *session) {
	n.mu.Lock()
	if n.cur == s {
		n.cur = nil
		n.f.connected.Add(-1)
	}
	n.mu.Unlock()
	s.cancel(nil)
}

// closeAll ends the current session (the fleet is closing).
func (n *node) closeAll() {
	n.mu.Lock()
	s := n.cur
	n.mu.Unlock()
	if s != nil {
		s.cancel(errShutdown)
	}
}

// inventoryLocked is every instance's report, sorted by key.
func (n *node) inventoryLocked() []*managerv1.InstanceReport {
	keys := make([]instKey, 0, len(n.insts))
	for k := range n.insts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b instKey) int {
		if a.job != b.job {
			if a.job < b.job {
				return -1
			}
			return 1
		}
		if a.role < b.role {
			return -1
		}
		if a.role > b.role {
			return 1
		}
		return 0
	})
	out := make([]*managerv1.InstanceReport, 0, len(keys))
	for _, k := range keys {
		out = append(out, n.insts[k].report(k))
	}
	return out
}

func (in *instance) report(k instKey) *managerv1.InstanceReport {
	r := &managerv1.InstanceReport{
		JobId:        k.job,
		Role:         k.role,
		FencingToken: in.token,
		Phase:        in.phase,
		JobHash:      in.jobHash,
	}
	if in.phase == managerv1.InstancePhase_INSTANCE_PHASE_STOPPING || in.phase == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
		r.Reason, r.AdditionalReason = in.reason, in.addl
	}
	if in.phase == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED {
		r.ExitCodes = map[string]int32{}
	}
	return r
}

// setPhase changes an instance's phase, keeping the fleet's count of
// running instances.
func (n *node) setPhase(in *instance, p managerv1.InstancePhase) {
	was := in.phase == managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	is := p == managerv1.InstancePhase_INSTANCE_PHASE_RUNNING
	in.phase = p
	switch {
	case is && !was:
		n.f.running.Add(1)
	case was && !is:
		n.f.running.Add(-1)
	}
}

// publishLocked sends an instance's report on the current stream, if one
// is up (the next hello's inventory carries it otherwise).
func (n *node) publishLocked(k instKey, in *instance) {
	n.sendLocked(in.report(k))
}

func (n *node) sendLocked(r *managerv1.InstanceReport) {
	if n.cur != nil {
		n.cur.enqueue(&managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Report{Report: r}})
		n.f.reports.Add(1)
	}
}

// heartbeat is a heartbeat with the node's load: each instance counts as
// 2 % of CPU and 64 MiB.
func (n *node) heartbeat() *managerv1.WorkerMessage {
	sent := uint64(time.Since(n.born).Milliseconds()) + 1
	n.mu.Lock()
	running := 0
	for _, in := range n.insts {
		if in.phase == managerv1.InstancePhase_INSTANCE_PHASE_RUNNING {
			running++
		}
	}
	n.mu.Unlock()
	n.f.heartbeats.Add(1)
	return &managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Heartbeat{Heartbeat: &managerv1.Heartbeat{
		Load: &managerv1.NodeLoad{
			CpuPercent:      min(100, 2*float64(running)),
			MemoryUsedBytes: uint64(running) << 26,
			Instances:       uint32(running),
			MeasuredAt:      timestamppb.Now(),
		},
		SentMonoMs: sent,
	}}}
}
