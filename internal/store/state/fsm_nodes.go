package state

import (
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// ProviderCluster is the provider of registered local servers.
const ProviderCluster = "cluster"

// SpareTag marks a local server as a hot spare.
const SpareTag = "spare"

func (t *tx) node(id string) (*storev1.NodeRecord, error) {
	rec := t.read().Node(nil, id)
	if rec == nil {
		return nil, apierr.NotFoundf("no node %q", id)
	}
	return rec, nil
}

// withNode returns a copy of rec whose node is a clone the caller may edit.
func (t *tx) withNode(rec *storev1.NodeRecord) (*storev1.NodeRecord, *managerv1.Node) {
	n := proto.Clone(rec.GetNode()).(*managerv1.Node)
	return &storev1.NodeRecord{
		Node:          n,
		Token:         rec.GetToken(),
		TokenUsed:     rec.GetTokenUsed(),
		NodeSecret:    rec.GetNodeSecret(),
		Deregistering: rec.GetDeregistering(),
		ModifyIndex:   t.index,
	}, n
}

func (t *tx) setState(n *managerv1.Node, st managerv1.NodeState, reason string) {
	n.State = st
	n.StateReason = reason
	n.StateSince = t.now
}

func (t *tx) nodeEvent(rec *storev1.NodeRecord, reason string) *managerv1.NodeEvent {
	return &managerv1.NodeEvent{Node: t.read().NodeView(rec), Reason: reason}
}

func (t *tx) slotEvent(kind string, rec *storev1.NodeRecord) {
	// Events never carry secrets: the registration token is for
	// ListClusterNodes, whose callers are checked.
	slot := SlotView(rec)
	slot.Token = ""
	ev := &managerv1.ClusterSlotEvent{Slot: slot}
	switch kind {
	case "registered":
		t.emit(&managerv1.Event{Kind: &managerv1.Event_ClusterSlotRegistered{ClusterSlotRegistered: ev}})
	case "updated":
		t.emit(&managerv1.Event{Kind: &managerv1.Event_ClusterSlotUpdated{ClusterSlotUpdated: ev}})
	case "deregistered":
		t.emit(&managerv1.Event{Kind: &managerv1.Event_ClusterSlotDeregistered{ClusterSlotDeregistered: ev}})
	}
}

// liveInstances are a node's instances that have not stopped.
func (t *tx) liveInstances(nodeID string) []*managerv1.Instance {
	var out []*managerv1.Instance
	for _, in := range t.read().InstancesOnNode(nil, nodeID) {
		if in.GetPhase() != phaseStopped {
			out = append(out, in)
		}
	}
	return out
}

func (t *tx) registerSlot(c *storev1.RegisterSlot) error {
	if err := needKey("node id", c.GetNodeId()); err != nil {
		return err
	}
	if err := needKey("node name", c.GetNodeName()); err != nil {
		return err
	}
	if c.GetToken() == "" {
		return apierr.New(apierr.Internal, "register slot: no token stamped")
	}
	if ex := t.read().NodeByName(nil, c.GetNodeName()); ex != nil {
		return apierr.AlreadyExistsf("a node named %q is already registered (node id %q)", c.GetNodeName(), ex.GetNode().GetNodeId())
	}
	if t.read().Node(nil, c.GetNodeId()) != nil {
		return apierr.AlreadyExistsf("node id %q is already registered", c.GetNodeId())
	}
	if t.read().NodeByToken(c.GetToken()) != nil {
		// memdb's unique index would silently move the token; never let two
		// slots share one.
		return apierr.AlreadyExistsf("that registration token belongs to another slot")
	}
	n := &managerv1.Node{
		NodeId:       c.GetNodeId(),
		NodeName:     c.GetNodeName(),
		Provider:     ProviderCluster,
		Tags:         map[string]string{},
		RegisteredAt: t.now,
	}
	for k, v := range c.GetTags() {
		n.Tags[k] = v
	}
	if c.GetPool() != "" {
		n.Tags["pool"] = c.GetPool()
	}
	if p := c.GetProvider(); p != "" && p != ProviderCluster {
		if _, spare := n.Tags[SpareTag]; spare && !c.GetSpareByReconciler() {
			return apierr.Invalid("tags", "the %q tag of an elastic node belongs to the AutoManager's reconciler", SpareTag)
		}
		n.Provider, n.ProviderInstance, n.Elastic, n.Hardware, n.Cloud = p, c.GetProviderInstance(), true, c.GetHardware(), c.GetCloud()
		t.setState(n, managerv1.NodeState_NODE_STATE_STARTING, "created by provider "+p+"; waiting for its worker")
	} else {
		if c.GetCloud() != nil {
			return apierr.Invalid("cloud", "a cluster slot runs on no cloud instance")
		}
		t.setState(n, managerv1.NodeState_NODE_STATE_REGISTERED, "registered; waiting for its worker")
	}
	rec := &storev1.NodeRecord{Node: n, Token: c.GetToken(), ModifyIndex: t.index}
	t.insert(tableNodes, rec)
	t.slotEvent("registered", rec)
	return nil
}

// memberRegister answers with the updated *storev1.NodeRecord.
func (t *tx) memberRegister(c *storev1.MemberRegister) (any, error) {
	var rec *storev1.NodeRecord
	switch {
	case c.GetToken() != "":
		rec = t.read().NodeByToken(c.GetToken())
		if rec == nil {
			return nil, apierr.Unauthenticatedf("registration token is not known (never issued, or its slot was deregistered)")
		}
		if rec.GetTokenUsed() {
			return nil, apierr.Unauthenticatedf("the registration token of node %q has already been used; a registered worker presents its node secret", rec.GetNode().GetNodeId())
		}
		if c.GetNodeSecret() == "" {
			return nil, apierr.New(apierr.Internal, "member register: no node secret stamped")
		}
		if t.read().NodeBySecret(c.GetNodeSecret()) != nil {
			return nil, apierr.AlreadyExistsf("that node secret belongs to another node")
		}
	case c.GetNodeSecret() != "":
		rec = t.read().NodeBySecret(c.GetNodeSecret())
		if rec == nil {
			return nil, apierr.Unauthenticatedf("node secret is not known (its slot may have been deregistered)")
		}
	default:
		return nil, apierr.Unauthenticatedf("neither a registration token nor a node secret was presented")
	}
	if rec.GetDeregistering() {
		return nil, apierr.Unauthenticatedf("node %q is being deregistered", rec.GetNode().GetNodeId())
	}
	if c.GetReconnect() && rec.GetNode().GetState() == managerv1.NodeState_NODE_STATE_TERMINATED {
		return nil, apierr.FailedPreconditionf("node %q was terminated; start its worker again to bring it back", rec.GetNode().GetNodeId())
	}
	nrec, n := t.withNode(rec)
	if c.GetToken() != "" {
		nrec.TokenUsed = true
		nrec.NodeSecret = c.GetNodeSecret()
	}
	n.Address = c.GetAddress()
	n.Hardware = cloudHardware(n, c.GetHardware())
	n.Capabilities = c.GetCapabilities()
	n.Runtime = c.GetRuntime()
	n.WorkerVersion = c.GetWorkerVersion()
	n.Tls = c.GetTls()
	if n.GetState() == managerv1.NodeState_NODE_STATE_TERMINATED && n.GetElastic() {
		return nil, apierr.FailedPreconditionf("elastic node %q was terminated; its provider creates a new node instead", n.GetNodeId())
	}
	if n.GetState() == managerv1.NodeState_NODE_STATE_TERMINATED {
		// A worker started again on a terminated server: it may be dialled.
		t.setState(n, managerv1.NodeState_NODE_STATE_REGISTERED, "worker registered again after termination")
	}
	t.insert(tableNodes, nrec)
	t.slotEvent("updated", nrec)
	return nrec, nil
}

func (t *tx) deregisterSlot(c *storev1.DeregisterSlot) error {
	rec, err := t.node(c.GetNodeId())
	if err != nil {
		return err
	}
	if rec.GetDeregistering() {
		return nil // in progress: idempotent
	}
	nrec, n := t.withNode(rec)
	nrec.Deregistering = true
	nrec.Token = "" // the token is void from now on
	t.setState(n, managerv1.NodeState_NODE_STATE_STOPPING, "deregistering")
	t.insert(tableNodes, nrec)
	for _, in := range t.liveInstances(n.GetNodeId()) {
		if in.GetDesired() != desiredStopped {
			t.requestStop(in, managerv1.StoppingReason_STOPPING_REASON_NODE_TERMINATED, "node deregistered", 0, "")
		}
	}
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeStopping{NodeStopping: t.nodeEvent(nrec, "deregistering")}})
	t.slotEvent("updated", nrec)
	return nil
}

func (t *tx) terminateNode(c *storev1.TerminateNode) error {
	rec, err := t.node(c.GetNodeId())
	if err != nil {
		return err
	}
	switch {
	case rec.GetDeregistering():
		return apierr.FailedPreconditionf("node %q is being deregistered", c.GetNodeId())
	case rec.GetNode().GetState() == managerv1.NodeState_NODE_STATE_TERMINATED,
		rec.GetNode().GetState() == managerv1.NodeState_NODE_STATE_STOPPING:
		return nil // idempotent
	}
	live := t.liveInstances(c.GetNodeId())
	if c.GetOnlyIfIdle() && len(live) > 0 {
		return apierr.FailedPreconditionf("node %q is not idle: it holds %d instance(s) (e.g. %s/%s)",
			c.GetNodeId(), len(live), live[0].GetJobId(), live[0].GetRole())
	}
	why := c.GetReason()
	if why == "" {
		why = "terminate requested"
	}
	nrec, n := t.withNode(rec)
	if n.GetState() == managerv1.NodeState_NODE_STATE_STARTING {
		// Its worker never called in: there is nothing to stop.
		t.setState(n, managerv1.NodeState_NODE_STATE_TERMINATED, why)
		t.insert(tableNodes, nrec)
		t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeTerminated{NodeTerminated: t.nodeEvent(nrec, why)}})
		return nil
	}
	t.setState(n, managerv1.NodeState_NODE_STATE_STOPPING, why)
	t.insert(tableNodes, nrec)
	stopWhy := "node terminated"
	if c.GetReason() != "" {
		stopWhy += ": " + c.GetReason()
	}
	for _, in := range live {
		if in.GetDesired() != desiredStopped {
			t.requestStop(in, managerv1.StoppingReason_STOPPING_REASON_NODE_TERMINATED, stopWhy, 0, "")
		}
	}
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeStopping{NodeStopping: t.nodeEvent(nrec, why)}})
	return nil
}

func (t *tx) nodeTerminated(c *storev1.NodeTerminated) error {
	rec, err := t.node(c.GetNodeId())
	if err != nil {
		return err
	}
	why := "node terminated"
	if rec.GetDeregistering() {
		why = "node deregistered"
	}
	for _, in := range t.liveInstances(c.GetNodeId()) {
		t.markStopped(in, managerv1.StoppingReason_STOPPING_REASON_NODE_TERMINATED, why)
	}
	nrec, n := t.withNode(rec)
	final := c.GetReason()
	if was := rec.GetNode(); was.GetState() == managerv1.NodeState_NODE_STATE_STOPPING && was.GetStateReason() != "" && was.GetStateReason() != "terminate requested" {
		// Keep why the node was terminated (the reaper's, a provider's),
		// with how its termination finished.
		final = was.GetStateReason() + " (" + c.GetReason() + ")"
	}
	t.setState(n, managerv1.NodeState_NODE_STATE_TERMINATED, final)
	if rec.GetDeregistering() {
		t.delete(tableNodes, rec)
		t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeTerminated{NodeTerminated: &managerv1.NodeEvent{Node: n, Reason: c.GetReason()}}})
		t.slotEvent("deregistered", nrec)
		return nil
	}
	if rec.GetNode().GetState() == managerv1.NodeState_NODE_STATE_TERMINATED {
		return nil
	}
	t.insert(tableNodes, nrec)
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeTerminated{NodeTerminated: t.nodeEvent(nrec, c.GetReason())}})
	t.slotEvent("updated", nrec)
	return nil
}

func (t *tx) setSlotPool(c *storev1.SetSlotPool) error {
	rec, err := t.node(c.GetNodeId())
	if err != nil {
		return err
	}
	if rec.GetNode().GetTags()["pool"] == c.GetPool() {
		return nil
	}
	nrec, n := t.withNode(rec)
	if n.Tags == nil {
		n.Tags = map[string]string{}
	}
	if c.GetPool() == "" {
		delete(n.Tags, "pool")
	} else {
		n.Tags["pool"] = c.GetPool()
	}
	t.insert(tableNodes, nrec)
	if n.GetState() == nodeOnline {
		// Cycle the node's lifecycle so consumers that key placement on
		// the pool tag see it leave and come back; its instances and its
		// worker's containers are untouched.
		const why = "pool changed"
		ev := t.nodeEvent(nrec, why)
		t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeStopping{NodeStopping: ev}})
		t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeTerminated{NodeTerminated: ev}})
		t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeOnline{NodeOnline: ev}})
	}
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeTagsUpdated{NodeTagsUpdated: t.nodeEvent(nrec, "pool changed")}})
	t.slotEvent("updated", nrec)
	return nil
}

func (t *tx) setNodeTags(c *storev1.SetNodeTags) error {
	rec, err := t.node(c.GetNodeId())
	if err != nil {
		return err
	}
	if v, ok := c.GetTags()[SpareTag]; ok {
		if rec.GetNode().GetProvider() != ProviderCluster && !c.GetByReconciler() {
			return apierr.FailedPreconditionf("the %q tag of elastic node %q belongs to the AutoManager's reconciler", SpareTag, c.GetNodeId())
		}
		if v == "true" {
			if live := t.liveInstances(c.GetNodeId()); len(live) > 0 {
				return apierr.FailedPreconditionf("node %q holds %d job instance(s) (e.g. %s/%s); a hot spare must be empty",
					c.GetNodeId(), len(live), live[0].GetJobId(), live[0].GetRole())
			}
		}
	}
	nrec, n := t.withNode(rec)
	if n.Tags == nil {
		n.Tags = map[string]string{}
	}
	keys := make([]string, 0, len(c.GetTags()))
	for k := range c.GetTags() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n.Tags[k] = c.GetTags()[k]
	}
	if max := t.rules().maxNodeTags; len(n.Tags) > max {
		return apierr.Invalid("tags", "the node would have %d tags (at most %d)", len(n.Tags), max)
	}
	t.insert(tableNodes, nrec)
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeTagsUpdated{NodeTagsUpdated: t.nodeEvent(nrec, "tags set")}})
	return nil
}

func (t *tx) setNodeIdleExpiry(c *storev1.SetNodeIdleExpiry) error {
	rec, err := t.node(c.GetNodeId())
	if err != nil {
		return err
	}
	nrec, n := t.withNode(rec)
	n.IdleExpiryMs = c.GetIdleExpiryMs()
	t.insert(tableNodes, nrec)
	return nil
}

// nodeOnline answers with the number of inventory reports that were stale.
func (t *tx) nodeOnline(c *storev1.NodeOnline) (any, error) {
	rec, err := t.node(c.GetNodeId())
	if err != nil {
		return nil, err
	}
	hello := c.GetHello()
	nrec, n := t.withNode(rec)
	if hw := hello.GetHardware(); hw != nil {
		n.Hardware = cloudHardware(n, hw)
	}
	n.Capabilities = hello.GetCapabilities()
	if hello.GetRuntime() != "" {
		n.Runtime = hello.GetRuntime()
	}
	if hello.GetWorkerVersion() != "" {
		n.WorkerVersion = hello.GetWorkerVersion()
	}
	n.HeldImages = boundHeldImages(hello.GetHeldImages())
	wasOnline := n.GetState() == nodeOnline
	switch n.GetState() {
	case managerv1.NodeState_NODE_STATE_REGISTERED, managerv1.NodeState_NODE_STATE_LOST, managerv1.NodeState_NODE_STATE_STARTING:
		t.setState(n, nodeOnline, "worker connected")
	}
	t.insert(tableNodes, nrec)
	if !wasOnline && n.GetState() == nodeOnline {
		t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeOnline{NodeOnline: t.nodeEvent(nrec, "worker connected")}})
	}
	// Adopt what the worker holds under current tokens.
	held := map[string]bool{}
	stale := 0
	for _, r := range hello.GetInventory() {
		if t.applyReport(c.GetNodeId(), r, true) {
			held[InstanceID(r.GetJobId(), r.GetRole())] = true
		} else {
			stale++
		}
	}
	// What the store has on this node that the worker does not hold is
	// gone — unless its start has not been delivered yet.
	for _, in := range t.liveInstances(c.GetNodeId()) {
		if held[InstanceID(in.GetJobId(), in.GetRole())] || in.GetPhase() == phaseProvisioned {
			continue
		}
		t.markStopped(in, managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED, "not found on the worker when it reconnected")
	}
	return stale, nil
}

func (t *tx) nodeLost(c *storev1.NodeLost) error {
	rec, err := t.node(c.GetNodeId())
	if err != nil {
		return err
	}
	if rec.GetNode().GetState() != nodeOnline {
		return nil
	}
	nrec, n := t.withNode(rec)
	t.setState(n, managerv1.NodeState_NODE_STATE_LOST, c.GetReason())
	t.insert(tableNodes, nrec)
	for _, in := range t.liveInstances(n.GetNodeId()) {
		if in.GetPhase() == phaseStopping {
			continue
		}
		x := shallowCopy(in)
		x.Phase = phaseStopping
		t.putInstance(x)
		t.record(x.GetJobId(), t.stoppingEntry(x, managerv1.StoppingReason_STOPPING_REASON_NODE_STOPPED, c.GetReason()))
	}
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeLost{NodeLost: t.nodeEvent(nrec, c.GetReason())}})
	return nil
}

// setNodeInstance records the instance a provider launched for an elastic
// node, or (no provider_instance) its next launch attempt. A node keeps
// the first instance recorded: a second is refused (the provider's
// reconciliation terminates it). A terminated node still takes its
// instance, so the provider can end it.
func (t *tx) setNodeInstance(c *storev1.SetNodeInstance) error {
	rec, err := t.node(c.GetNodeId())
	if err != nil {
		return err
	}
	cur := rec.GetNode()
	switch {
	case !cur.GetElastic():
		return apierr.FailedPreconditionf("node %q is not an elastic node", c.GetNodeId())
	case cur.GetProviderInstance() != "" && c.GetProviderInstance() != cur.GetProviderInstance():
		return apierr.FailedPreconditionf("node %q already runs on instance %s", c.GetNodeId(), cur.GetProviderInstance())
	case c.GetProviderInstance() == "" && c.GetCloud() == nil:
		return apierr.Invalid("providerInstance", "give the instance or the next launch")
	}
	nrec, n := t.withNode(rec)
	if c.GetProviderInstance() != "" {
		n.ProviderInstance = c.GetProviderInstance()
	}
	if c.GetCloud() != nil {
		n.Cloud = c.GetCloud()
	}
	t.insert(tableNodes, nrec)
	why := "instance " + n.GetProviderInstance() + " recorded"
	if c.GetProviderInstance() == "" {
		why = "launching " + n.GetCloud().GetInstanceType() + " (attempt " + strconv.Itoa(int(n.GetCloud().GetAttempt())) + ")"
	}
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeTagsUpdated{NodeTagsUpdated: t.nodeEvent(nrec, why)}})
	return nil
}

// cloudHardware is the hardware a worker reports, except that a cloud
// node's vCPUs and memory stay its instance type's (recorded at its
// creation): the instance-type cache is authoritative for capacity.
func cloudHardware(n *managerv1.Node, reported *managerv1.Hardware) *managerv1.Hardware {
	promised := n.GetHardware()
	if n.GetCloud().GetInstanceType() == "" || promised.GetVcpus() == 0 || reported == nil {
		return reported
	}
	hw := proto.Clone(reported).(*managerv1.Hardware)
	hw.Vcpus = promised.GetVcpus()
	if promised.GetMemoryBytes() > 0 {
		hw.MemoryBytes = promised.GetMemoryBytes()
	}
	return hw
}

// MaxHeldImages bounds a node's held_images: a worker that reports more
// is recorded with the first ones.
const MaxHeldImages = 512

func boundHeldImages(images []*managerv1.HeldImage) []*managerv1.HeldImage {
	if len(images) > MaxHeldImages {
		images = images[:MaxHeldImages]
	}
	return images
}

// sameHeldImages reports whether two inventories are equal.
func sameHeldImages(a, b []*managerv1.HeldImage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// setNodeImages records what a node's worker holds now
// (node_images_updated when it changed).
func (t *tx) setNodeImages(c *storev1.SetNodeImages) error {
	rec, err := t.node(c.GetNodeId())
	if err != nil {
		return err
	}
	t.putHeldImages(rec, c.GetImages(), "held images changed")
	return nil
}

func (t *tx) putHeldImages(rec *storev1.NodeRecord, images []*managerv1.HeldImage, why string) {
	images = boundHeldImages(images)
	if sameHeldImages(rec.GetNode().GetHeldImages(), images) {
		return
	}
	nrec, n := t.withNode(rec)
	n.HeldImages = images
	t.insert(tableNodes, nrec)
	t.emit(&managerv1.Event{Kind: &managerv1.Event_NodeImagesUpdated{NodeImagesUpdated: t.nodeEvent(nrec, why)}})
}

// recordImagesPrefetched emits a prefetch's outcome, then records the
// node's images after it.
func (t *tx) recordImagesPrefetched(c *storev1.RecordImagesPrefetched) error {
	p := c.GetPrefetched()
	rec, err := t.node(p.GetNodeId())
	if err != nil {
		return err
	}
	ev := proto.Clone(p).(*managerv1.ImagesPrefetched)
	ev.HeldImages = nil // the node event right behind carries them
	t.emit(&managerv1.Event{Kind: &managerv1.Event_ImagesPrefetched{ImagesPrefetched: ev}})
	t.putHeldImages(rec, p.GetHeldImages(), "images prefetched")
	return nil
}
