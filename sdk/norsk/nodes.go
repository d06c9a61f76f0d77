package norsk

import (
	"context"
	"time"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// RegisterClusterNode pre-registers a cluster slot (a local server) named
// nodeName in pool ("" = none). It returns the slot's node id and the
// one-shot token to hand to the server's worker, which presents it with
// ClusterMemberRegister (norsk-ctl worker --token … --manager-url …). Until
// then the slot is registered but inactive. Errors: ErrInvalidArgument (bad
// name), ErrAlreadyExists (the name is taken), ErrUnavailable.
func (m *Manager) RegisterClusterNode(ctx context.Context, nodeName, pool string) (*RegisterClusterNodeResponse, error) {
	const op = "RegisterClusterNode"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.RegisterClusterNode(ctx, connect.NewRequest(&managerv1.RegisterClusterNodeRequest{NodeName: nodeName, Pool: pool}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// ClusterMemberRegister is the worker's call: it presents its registration
// token (first call) or node secret (later calls) and tells the Manager where
// to dial it back. On success the Manager marks the node online and dials the
// worker. Errors: ErrUnauthenticated (the token is unknown, used, or its slot
// deregistered), ErrInvalidArgument (bad address or hardware).
// Most callers never use it: norsk-ctl worker does.
func (m *Manager) ClusterMemberRegister(ctx context.Context, req *ClusterMemberRegisterRequest) (*ClusterMemberRegisterResponse, error) {
	const op = "ClusterMemberRegister"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ClusterMemberRegister(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// ListClusterNodes returns every registered cluster slot, active or not, with
// its registration token, so that an operator can copy it again.
func (m *Manager) ListClusterNodes(ctx context.Context) ([]*ClusterSlot, error) {
	const op = "ListClusterNodes"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ListClusterNodes(ctx, connect.NewRequest(&managerv1.ListClusterNodesRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetSlots(), nil
}

// DeregisterClusterNode removes the cluster slot nodeID and invalidates its
// token. A worker connected on the slot is disconnected and the instances
// running there are stopped. Errors: ErrNotFound, ErrUnavailable.
func (m *Manager) DeregisterClusterNode(ctx context.Context, nodeID string) error {
	const op = "DeregisterClusterNode"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.DeregisterClusterNode(ctx, connect.NewRequest(&managerv1.DeregisterClusterNodeRequest{NodeId: nodeID}))
	return wrapError(op, err)
}

// SetClusterNodePool moves the cluster slot nodeID to pool ("" = no pool).
// An active slot's node cycles stopping → terminated → online so that the
// new pool tag reaches placement; its containers survive. Callers should make
// sure no job is assigned to the node meanwhile. Errors: ErrNotFound,
// ErrInvalidArgument, ErrUnavailable.
func (m *Manager) SetClusterNodePool(ctx context.Context, nodeID, pool string) error {
	const op = "SetClusterNodePool"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.SetClusterNodePool(ctx, connect.NewRequest(&managerv1.SetClusterNodePoolRequest{NodeId: nodeID, Pool: pool}))
	return wrapError(op, err)
}

// ListNodes returns every node the Manager knows, of every provider and
// state, with the live facts (connection, load, instances) of its worker.
func (m *Manager) ListNodes(ctx context.Context) ([]*Node, error) {
	const op = "ListNodes"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ListNodes(ctx, connect.NewRequest(&managerv1.ListNodesRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetNodes(), nil
}

// TerminateNode forcibly stops the node nodeID: its instances are stopped
// (reason node_terminated) and its provider releases it. Terminating a node
// already terminated (or being terminated) changes nothing and is not an
// error. Errors: ErrNotFound, ErrUnavailable.
func (m *Manager) TerminateNode(ctx context.Context, nodeID string) error {
	const op = "TerminateNode"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.TerminateNode(ctx, connect.NewRequest(&managerv1.TerminateNodeRequest{NodeId: nodeID}))
	return wrapError(op, err)
}

// MockNode asks CreateMockNode for a node.
type MockNode struct {
	// NodeID names the node ("" = the Manager names it).
	NodeID string
	// Pool is the pool tier it joins ("" = the provider's first pool).
	Pool string
	Tags map[string]string
}

// CreateMockNode provisions an elastic node from the Manager's mock
// provider: a free mock host boots a worker that registers as the node
// (as createAwsNode launches an instance). It returns the node's id and
// host once the host has been told; the node is STARTING until its worker
// calls in, then ONLINE. Errors: ErrFailedPrecondition (no mock provider
// configured), ErrInvalidArgument (a pool the provider does not serve),
// ErrResourceExhausted (every host in use), ErrUnavailable (the host did
// not answer; the node is recorded terminated).
func (m *Manager) CreateMockNode(ctx context.Context, n MockNode) (nodeID, host string, err error) {
	const op = "CreateMockNode"
	if err := m.alive(op); err != nil {
		return "", "", err
	}
	res, err := m.client.CreateMockNode(ctx, connect.NewRequest(&managerv1.CreateMockNodeRequest{NodeId: n.NodeID, Pool: n.Pool, Tags: n.Tags}))
	if err != nil {
		return "", "", wrapError(op, err)
	}
	return res.Msg.GetNodeId(), res.Msg.GetHost(), nil
}

// SetNodeTags merges tags onto the node nodeID (a key given replaces its
// value; keys not given are untouched) and returns the node as it now is. The
// daemon persists the edit, re-applies it when it rediscovers the node, and
// announces it as a node_tags_updated event. The "spare" tag is the
// daemon's: refused on an elastic node, and on a cluster node that holds a
// job (ErrFailedPrecondition). Errors: ErrNotFound, ErrInvalidArgument,
// ErrFailedPrecondition, ErrUnavailable.
func (m *Manager) SetNodeTags(ctx context.Context, nodeID string, tags map[string]string) (*Node, error) {
	const op = "SetNodeTags"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.SetNodeTags(ctx, connect.NewRequest(&managerv1.SetNodeTagsRequest{NodeId: nodeID, Tags: tags}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetNode(), nil
}

// PrefetchImages tells the worker of the node nodeID to pull imageRefs now
// (Phase G, warm nodes), so that a later start there finds them local. It
// returns as soon as the worker has been told, with the request's id: each
// ref's outcome (pulled, already present, failed and why; digest and size)
// arrives on the event stream as its own images_prefetched event carrying
// that id, as the worker finishes it, and the node's held_images update
// right behind it (a node_images_updated event, when they changed). One ref's failure never fails the others.
// Errors: ErrInvalidArgument (no refs, more than 64, a ref that is not an
// image reference), ErrNotFound, ErrFailedPrecondition (the node is not
// online, or its runtime holds no images), ErrUnavailable (its worker is not
// connected).
//
// The answer's Index is the store index when the worker was told: follow
// the outcomes with EventStream(ctx, EventStreamSettings{AfterIndex: Index}).
func (m *Manager) PrefetchImages(ctx context.Context, nodeID string, imageRefs []string) (*PrefetchImagesResponse, error) {
	const op = "PrefetchImages"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.PrefetchImages(ctx, connect.NewRequest(&managerv1.PrefetchImagesRequest{NodeId: nodeID, ImageRefs: imageRefs}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// GetNodeIdleExpiry says which idle expiry applies to the node nodeID:
// IdleExpiryMs is its override (0 = none) and EffectiveIdleExpiryMs what the
// empty-node reaper applies (the override, else the daemon-wide value).
// Errors: ErrNotFound.
func (m *Manager) GetNodeIdleExpiry(ctx context.Context, nodeID string) (*NodeIdleExpiry, error) {
	const op = "GetNodeIdleExpiry"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.GetNodeIdleExpiry(ctx, connect.NewRequest(&managerv1.GetNodeIdleExpiryRequest{NodeId: nodeID}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// SetNodeIdleExpiry gives the node nodeID its own grace period before the
// empty-node reaper terminates it, overriding the daemon-wide value; 0 clears
// the override. The setting is persisted and survives a Manager restart. It
// returns the expiry now in force. Errors: ErrNotFound, ErrInvalidArgument
// (negative), ErrUnavailable.
func (m *Manager) SetNodeIdleExpiry(ctx context.Context, nodeID string, idleExpiry time.Duration) (*NodeIdleExpiry, error) {
	const op = "SetNodeIdleExpiry"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.SetNodeIdleExpiry(ctx, connect.NewRequest(&managerv1.SetNodeIdleExpiryRequest{NodeId: nodeID, IdleExpiryMs: idleExpiry.Milliseconds()}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}
