package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/cluster"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

func (h *Handler) RegisterClusterNode(ctx context.Context, req *connect.Request[managerv1.RegisterClusterNodeRequest]) (*connect.Response[managerv1.RegisterClusterNodeResponse], error) {
	name := req.Msg.GetNodeName()
	if err := jobspec.ValidateID("nodeName", name); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.ValidatePool("pool", req.Msg.GetPool()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if ex := h.read().NodeByName(nil, name); ex != nil {
		return nil, rpcerr.ToConnect(apierr.AlreadyExistsf("a node named %s is already registered (node id %s)", apierr.Quote(name), apierr.Quote(ex.GetNode().GetNodeId())))
	}
	token := auth.RandomToken("nrt_", 24)
	// A slot's node id is its name: operators read and type it.
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_RegisterSlot{RegisterSlot: &storev1.RegisterSlot{
		NodeId: name, NodeName: name, Pool: req.Msg.GetPool(), Token: token,
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.RegisterClusterNodeResponse{NodeId: name, Token: token}), nil
}

// validateDialAddress checks a worker's dial-back host:port.
func validateDialAddress(field, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return apierr.Invalid(field, "%s is not host:port", apierr.Quote(addr))
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return apierr.Invalid(field, "%s: port must be 1-65535", apierr.Quote(addr))
	}
	if host == "" {
		return apierr.Invalid(field, "%s: the Manager needs a host to dial", apierr.Quote(addr))
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return apierr.Invalid(field, "%s: %s is not an address the Manager can dial", apierr.Quote(addr), host)
	}
	return nil
}

func (h *Handler) ClusterMemberRegister(ctx context.Context, req *connect.Request[managerv1.ClusterMemberRegisterRequest]) (*connect.Response[managerv1.ClusterMemberRegisterResponse], error) {
	m := req.Msg
	if err := validateDialAddress("address", m.GetAddress()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := validateIncarnation("workerIncarnation", m.GetWorkerIncarnation()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if m.GetToken() == "" {
		// Only the primary holds the workers' streams, so only it knows
		// whether another process of the node holds one: a follower passes
		// a registration by node secret on, and the primary's answer (its
		// refusal included) is the answer.
		if out, ok, err := askPrimaryFor(ctx, h, req.Header(), func(ctx context.Context, c managerv1connect.ManagerClient) (*connect.Response[managerv1.ClusterMemberRegisterResponse], error) {
			return c.ClusterMemberRegister(ctx, cluster.WithAuth(req, connect.NewRequest(m)))
		}, connect.IsWireError); ok {
			return out, relayRefusal(err)
		}
	}
	cmd := &storev1.MemberRegister{
		Address:       m.GetAddress(),
		Hardware:      m.GetHardware(),
		Capabilities:  m.GetCapabilities(),
		Runtime:       m.GetRuntime(),
		WorkerVersion: m.GetWorkerVersion(),
		Reconnect:     m.GetReconnect(),
	}
	r := h.read()
	switch {
	case m.GetToken() != "":
		// Checked before proposing so a bad token writes nothing at all.
		rec := r.NodeByToken(m.GetToken())
		if rec == nil {
			return nil, rpcerr.ToConnect(apierr.Unauthenticatedf("registration token is not known (never issued, or its slot was deregistered)"))
		}
		if rec.GetTokenUsed() {
			return nil, rpcerr.ToConnect(apierr.Unauthenticatedf("the registration token of node %s has already been used; a registered worker presents its node secret", apierr.Quote(rec.GetNode().GetNodeId())))
		}
		cmd.Token = m.GetToken()
		cmd.NodeSecret = auth.RandomToken("nns_", 32)
	case m.GetNodeSecret() != "":
		rec := r.NodeBySecret(m.GetNodeSecret())
		if rec == nil {
			return nil, rpcerr.ToConnect(apierr.Unauthenticatedf("node secret is not known (its slot may have been deregistered)"))
		}
		if m.GetReconnect() && rec.GetNode().GetState() == managerv1.NodeState_NODE_STATE_TERMINATED {
			return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("node %s was terminated; start its worker again to bring it back", apierr.Quote(rec.GetNode().GetNodeId())))
		}
		cmd.NodeSecret = m.GetNodeSecret()
		if err := h.oneWorkerPerNode(rec.GetNode().GetNodeId(), m.GetWorkerIncarnation()); err != nil {
			return nil, err
		}
	default:
		return nil, rpcerr.ToConnect(apierr.Unauthenticatedf("present a registration token (first registration) or the node secret"))
	}
	// With TLS the worker's key is certified for this node (certificates.go); its
	// stream is dialled over mutual TLS from now on.
	certDER, caDER, err := h.workerCertificate(m, r)
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	cmd.Tls = certDER != nil
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_MemberRegister{MemberRegister: cmd}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	rec := res.Value.(*storev1.NodeRecord)
	h.cfg.Log.Info("worker registered", "node", rec.GetNode().GetNodeId(), "address", m.GetAddress(), "runtime", m.GetRuntime())
	return connect.NewResponse(&managerv1.ClusterMemberRegisterResponse{
		NodeId:              rec.GetNode().GetNodeId(),
		NodeSecret:          rec.GetNodeSecret(),
		NodeName:            rec.GetNode().GetNodeName(),
		HeartbeatIntervalMs: uint32(h.cfg.HeartbeatInterval.Milliseconds()),
		CertificateDer:      certDER,
		CaCertificatesDer:   caDER,
		ClusterId:           h.read().ClusterID(),
	}), nil
}

// maxIncarnation bounds a worker incarnation's length.
const maxIncarnation = 64

// validateIncarnation accepts "" (a worker older than incarnations) or up to
// 64 characters of [A-Za-z0-9_-].
func validateIncarnation(field, v string) error {
	if len(v) > maxIncarnation {
		return apierr.Invalid(field, "%d characters; at most %d", len(v), maxIncarnation)
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return apierr.Invalid(field, "only A-Z, a-z, 0-9, '-' and '_' are allowed")
		}
	}
	return nil
}

// oneWorkerPerNode refuses the registration of a worker process while the
// node controller holds a live stream with another process of the same
// node (decision 0027): two processes with one node identity would
// otherwise take the node from each other in turns, each reporting its own
// inventory, and every instance only one of them holds would be recorded
// stopped and started again. The refused process is never dialled; it
// keeps asking, and takes the node over once the holder's stream is gone.
// Without a controller (a follower, or between primary terms) nothing is
// held.
func (h *Handler) oneWorkerPerNode(nodeID, incarnation string) error {
	ctl := h.b.Controller()
	if ctl == nil {
		return nil
	}
	held, addr, ok := ctl.Holder(nodeID)
	if !ok || held == incarnation {
		return nil
	}
	h.cfg.Log.Warn("refused a registration: another worker process holds the node's live stream",
		"node", nodeID, "holder_incarnation", held, "holder_address", addr, "incarnation", incarnation)
	return refusalHeld(fmt.Sprintf("node %q already has a live worker process (incarnation %q at %s); a second process with the same node identity is refused while it lives",
		nodeID, held, addr))
}

// refusalHeld is the ALREADY_EXISTS refusal of a second worker process,
// with the refusal header the worker acts on.
func refusalHeld(msg string) error {
	ce := connect.NewError(connect.CodeAlreadyExists, errors.New(msg))
	ce.Meta().Set(apierr.RefusalHeader, apierr.RefusalNodeHeldByLiveWorker)
	return ce
}

// relayRefusal passes the primary's refusal of a registration on as this
// member's own: the code, the message and the refusal header the worker
// acts on (and nothing else of the primary's response metadata).
func relayRefusal(err error) error {
	var ce *connect.Error
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	out := connect.NewError(ce.Code(), errors.New(ce.Message()))
	if v := ce.Meta().Get(apierr.RefusalHeader); v != "" {
		out.Meta().Set(apierr.RefusalHeader, v)
	}
	return out
}

func (h *Handler) ListClusterNodes(ctx context.Context, req *connect.Request[managerv1.ListClusterNodesRequest]) (*connect.Response[managerv1.ListClusterNodesResponse], error) {
	out := &managerv1.ListClusterNodesResponse{}
	secrets := auth.MayReadSecrets(ctx)
	for _, rec := range h.read().Nodes(nil) {
		if rec.GetNode().GetProvider() == state.ProviderCluster {
			slot := state.SlotView(rec)
			if !secrets {
				slot.Token = ""
			}
			out.Slots = append(out.Slots, slot)
		}
	}
	return connect.NewResponse(out), nil
}

// requireNode checks an id and that the node exists.
func (h *Handler) requireNode(id string) (*storev1.NodeRecord, error) {
	if err := jobspec.ValidateID("nodeId", id); err != nil {
		return nil, err
	}
	rec := h.read().Node(nil, id)
	if rec == nil {
		return nil, apierr.NotFoundf("no node %s", apierr.Quote(id))
	}
	return rec, nil
}

func (h *Handler) DeregisterClusterNode(ctx context.Context, req *connect.Request[managerv1.DeregisterClusterNodeRequest]) (*connect.Response[managerv1.DeregisterClusterNodeResponse], error) {
	if _, err := h.requireNode(req.Msg.GetNodeId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_DeregisterSlot{DeregisterSlot: &storev1.DeregisterSlot{NodeId: req.Msg.GetNodeId()}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.DeregisterClusterNodeResponse{}), nil
}

func (h *Handler) SetClusterNodePool(ctx context.Context, req *connect.Request[managerv1.SetClusterNodePoolRequest]) (*connect.Response[managerv1.SetClusterNodePoolResponse], error) {
	if _, err := h.requireNode(req.Msg.GetNodeId()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.ValidatePool("pool", req.Msg.GetPool()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_SetSlotPool{SetSlotPool: &storev1.SetSlotPool{NodeId: req.Msg.GetNodeId(), Pool: req.Msg.GetPool()}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.SetClusterNodePoolResponse{}), nil
}
