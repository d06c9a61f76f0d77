package mgr

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// view is norsk-mgr's copy of the Manager's jobs, nodes, migrations and
// leases, kept by following the event stream (from a snapshot, then live):
// the console's counts, lists and the discovery replica's directory are
// read from it, never by asking the Manager again, and every change is
// passed to the hub for the browsers.
type view struct {
	hub *hub

	mu         sync.RWMutex
	ready      bool
	index      uint64
	jobs       map[string]*norsk.JobWithHistory
	nodes      map[string]*norsk.Node
	migrations map[string]*norsk.MigrationState
	leases     *norsk.LeaseStatus
	// pending is the snapshot being received.
	pendingJobs  map[string]*norsk.JobWithHistory
	pendingNodes map[string]*norsk.Node
}

func newView(h *hub) *view {
	return &view{hub: h, jobs: map[string]*norsk.JobWithHistory{}, nodes: map[string]*norsk.Node{},
		migrations: map[string]*norsk.MigrationState{}}
}

// follow applies the event stream until ctx ends; the SDK's stream resumes
// by itself, and a resync snapshot replaces what the view held.
func (v *view) follow(ctx context.Context, m *norsk.Manager, log *slog.Logger) {
	for ctx.Err() == nil {
		if migs, err := m.ListMigrations(ctx, ""); err == nil {
			v.mu.Lock()
			for _, st := range migs {
				v.migrations[st.GetMigrationId()] = st
			}
			v.mu.Unlock()
		}
		if ls, err := m.GetLeaseStatus(ctx); err == nil {
			v.mu.Lock()
			v.leases = ls
			v.mu.Unlock()
		}
		es := m.EventStream(ctx, norsk.EventStreamSettings{})
		for es.Next() {
			v.apply(es.Event())
		}
		err := es.Err()
		_ = es.Close()
		if ctx.Err() != nil {
			return
		}
		log.Warn("event stream ended; following it again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// change is what the hub tells browsers of one event.
type change struct {
	Kind  string `json:"kind"`
	ID    string `json:"id,omitempty"`
	Index uint64 `json:"index,string"`
}

func (v *view) apply(ev *norsk.Event) {
	v.mu.Lock()
	var c change
	c.Index = ev.GetIndex()
	switch {
	case ev.GetJobSnapshot() != nil:
		if v.pendingJobs == nil {
			v.pendingJobs, v.pendingNodes = map[string]*norsk.JobWithHistory{}, map[string]*norsk.Node{}
		}
		j := ev.GetJobSnapshot()
		v.pendingJobs[j.GetJob().GetJobId()] = j
		v.mu.Unlock()
		return
	case ev.GetNodeSnapshot() != nil:
		if v.pendingJobs == nil {
			v.pendingJobs, v.pendingNodes = map[string]*norsk.JobWithHistory{}, map[string]*norsk.Node{}
		}
		n := ev.GetNodeSnapshot()
		v.pendingNodes[n.GetNodeId()] = n
		v.mu.Unlock()
		return
	case ev.GetInitialDataComplete() != nil:
		if v.pendingJobs == nil {
			v.pendingJobs, v.pendingNodes = map[string]*norsk.JobWithHistory{}, map[string]*norsk.Node{}
		}
		v.jobs, v.nodes = v.pendingJobs, v.pendingNodes
		v.pendingJobs, v.pendingNodes = nil, nil
		v.ready = true
		v.index = ev.GetInitialDataComplete().GetIndex()
		c.Kind = "resync"
	case ev.GetJobCreated() != nil:
		j := ev.GetJobCreated().GetJob()
		v.jobs[j.GetJob().GetJobId()] = j
		c.Kind, c.ID = "job", j.GetJob().GetJobId()
	case ev.GetJobUpdated() != nil:
		j := ev.GetJobUpdated().GetJob()
		v.jobs[j.GetJob().GetJobId()] = j
		c.Kind, c.ID = "job", j.GetJob().GetJobId()
	case ev.GetJobDeleted() != nil:
		delete(v.jobs, ev.GetJobDeleted().GetJobId())
		c.Kind, c.ID = "job", ev.GetJobDeleted().GetJobId()
	case ev.GetMigrationUpdated() != nil:
		st := ev.GetMigrationUpdated()
		v.migrations[st.GetMigrationId()] = st
		c.Kind, c.ID = "migration", st.GetMigrationId()
	case ev.GetMigrationForgotten() != nil:
		for _, id := range ev.GetMigrationForgotten().GetMigrationIds() {
			delete(v.migrations, id)
		}
		c.Kind = "migration"
	case ev.GetLeaseStatus() != nil:
		v.leases = ev.GetLeaseStatus()
		c.Kind = "leases"
	case ev.GetBundleCreated() != nil || ev.GetBundleUpdated() != nil || ev.GetBundleDeleted() != nil:
		c.Kind = "bundle"
	case ev.GetClusterSlotRegistered() != nil || ev.GetClusterSlotUpdated() != nil || ev.GetClusterSlotDeregistered() != nil:
		c.Kind = "node"
	case ev.GetNodeDrainUpdated() != nil:
		// The node's drain moved on: the node as shown carries it.
		d := ev.GetNodeDrainUpdated()
		if n := v.nodes[d.GetNodeId()]; n != nil {
			n = proto.Clone(n).(*norsk.Node)
			n.Drain = d
			v.nodes[d.GetNodeId()] = n
		}
		c.Kind, c.ID = "node", d.GetNodeId()
	case ev.GetPlacement() != nil:
		c.Kind, c.ID = "placement", ev.GetPlacement().GetJobId()
	default:
		if n := nodeOf(ev); n != nil {
			v.nodes[n.GetNodeId()] = n
			c.Kind, c.ID = "node", n.GetNodeId()
		} else {
			c.Kind = "event"
		}
	}
	if ev.GetIndex() > v.index {
		v.index = ev.GetIndex()
	}
	v.mu.Unlock()
	v.hub.publish(c)
}

func nodeOf(ev *norsk.Event) *norsk.Node {
	for _, ne := range []*norsk.NodeEvent{ev.GetNodeOnline(), ev.GetNodeLost(), ev.GetNodeStopping(), ev.GetNodeTerminated(), ev.GetNodeTagsUpdated(), ev.GetNodeImagesUpdated()} {
		if ne != nil {
			return ne.GetNode()
		}
	}
	return nil
}

// Ready reports whether the first snapshot has arrived.
func (v *view) Ready() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.ready
}

// Nodes returns every node, by id.
func (v *view) Nodes() []*norsk.Node {
	v.mu.RLock()
	out := make([]*norsk.Node, 0, len(v.nodes))
	for _, n := range v.nodes {
		out = append(out, n)
	}
	v.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].GetNodeId() < out[j].GetNodeId() })
	return out
}

// Migrations returns every migration, newest first.
func (v *view) Migrations() []*norsk.MigrationState {
	v.mu.RLock()
	out := make([]*norsk.MigrationState, 0, len(v.migrations))
	for _, st := range v.migrations {
		out = append(out, st)
	}
	v.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].GetStartedAt().AsTime().After(out[j].GetStartedAt().AsTime())
	})
	return out
}

// Leases is the latest lease status (nil before the first).
func (v *view) Leases() *norsk.LeaseStatus {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.leases
}

// jobCounts counts jobs by their instances' phase ("idle" for a job with
// no instance, "failed" for a terminally failed one) and instances running
// per node.
type jobCounts struct {
	Jobs      int            `json:"jobs"`
	ByPhase   map[string]int `json:"byPhase"`
	OnNode    map[string]int `json:"-"`
	Instances int            `json:"instances"`
}

func (v *view) counts() jobCounts {
	v.mu.RLock()
	defer v.mu.RUnlock()
	c := jobCounts{Jobs: len(v.jobs), ByPhase: map[string]int{}, OnNode: map[string]int{}}
	for _, j := range v.jobs {
		if j.GetJob().GetTerminalState().GetKind() == norsk.TerminalKindFailed {
			c.ByPhase["failed"]++
			continue
		}
		if len(j.GetInstances()) == 0 {
			c.ByPhase["idle"]++
			continue
		}
		best := ""
		for _, in := range j.GetInstances() {
			c.Instances++
			p := phaseName(in.GetPhase())
			if in.GetPhase() == norsk.InstancePhaseRunning {
				c.OnNode[in.GetNodeId()]++
			}
			if best == "" || phaseRank(p) > phaseRank(best) {
				best = p
			}
		}
		c.ByPhase[best]++
	}
	return c
}

// Directory is the discovery replica's service directory: every instance
// with its node and resolved ports, of the jobs match selects (nil: all).
func (v *view) Directory(match func(*norsk.Job) bool) []directoryEntry {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []directoryEntry
	for _, j := range v.jobs {
		if match != nil && !match(j.GetJob()) {
			continue
		}
		for _, in := range j.GetInstances() {
			e := directoryEntry{JobID: in.GetJobId(), Role: in.GetRole(), NodeID: in.GetNodeId(), Phase: phaseName(in.GetPhase()),
				Tags: j.GetJob().GetTags(), Ports: map[string][]directoryPort{}}
			for svc, pm := range in.GetServicePortMappings() {
				for _, p := range pm.GetMappings() {
					e.Ports[svc] = append(e.Ports[svc], directoryPort{URL: p.GetUrl(), Target: p.GetTarget(), Published: p.GetPublished(), Protocol: p.GetProtocol().String()})
				}
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].JobID != out[j].JobID {
			return out[i].JobID < out[j].JobID
		}
		return out[i].Role < out[j].Role
	})
	return out
}

type directoryEntry struct {
	JobID  string                     `json:"jobId"`
	Role   string                     `json:"role"`
	NodeID string                     `json:"nodeId"`
	Phase  string                     `json:"phase"`
	Tags   map[string]string          `json:"tags,omitempty"`
	Ports  map[string][]directoryPort `json:"ports"`
}

type directoryPort struct {
	URL       string `json:"url"`
	Target    uint32 `json:"target"`
	Published uint32 `json:"published"`
	Protocol  string `json:"protocol"`
}

func phaseName(p norsk.InstancePhase) string {
	switch p {
	case norsk.InstancePhaseProvisioned:
		return "provisioned"
	case norsk.InstancePhasePrepared:
		return "prepared"
	case norsk.InstancePhaseRunning:
		return "running"
	case norsk.InstancePhaseStopping:
		return "stopping"
	case norsk.InstancePhaseStopped:
		return "stopped"
	}
	return "unknown"
}

func phaseRank(p string) int {
	switch p {
	case "running":
		return 5
	case "prepared":
		return 4
	case "provisioned":
		return 3
	case "stopping":
		return 2
	case "stopped":
		return 1
	}
	return 0
}

// hub fans changes out to the browsers' event streams. A subscriber that
// falls behind loses changes and is sent "resync" (it reloads its page's
// data); publishing never waits.
type hub struct {
	mu     sync.Mutex
	subs   map[chan change]bool
	closed bool
}

func newHub() *hub { return &hub{subs: map[chan change]bool{}} }

func (h *hub) subscribe() (chan change, func()) {
	ch := make(chan change, 256)
	h.mu.Lock()
	if h.closed {
		close(ch)
	} else {
		h.subs[ch] = true
	}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		if h.subs[ch] {
			delete(h.subs, ch)
			close(ch)
		}
		h.mu.Unlock()
	}
}

func (h *hub) publish(c change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- c:
		default:
			// Behind: replace what is queued by one resync.
			for len(ch) > 0 {
				select {
				case <-ch:
				default:
				}
			}
			select {
			case ch <- change{Kind: "resync", Index: c.Index}:
			default:
			}
		}
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		close(ch)
		delete(h.subs, ch)
	}
}
