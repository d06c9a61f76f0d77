package api

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

func (h *Handler) KvCommit(ctx context.Context, req *connect.Request[managerv1.KvCommitRequest]) (*connect.Response[managerv1.KvCommitResponse], error) {
	m := req.Msg
	opts := m.GetOptions()
	if opts == nil {
		opts = &managerv1.KvCommitOptions{}
	}
	if err := jobspec.ValidateKVCommit(m.GetNamespace(), m.GetWrites(), opts); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	res, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_KvCommit{KvCommit: &storev1.KvCommit{
		Namespace: m.GetNamespace(), Writes: m.GetWrites(), Options: opts,
	}}})
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(res.Value.(*managerv1.KvCommitResponse)), nil
}

func (h *Handler) KvGet(ctx context.Context, req *connect.Request[managerv1.KvGetRequest]) (*connect.Response[managerv1.KvGetResponse], error) {
	if err := jobspec.ValidateKVNamespace(req.Msg.GetNamespace()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if err := jobspec.ValidateKVKey("key", req.Msg.GetKey()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	out := &managerv1.KvGetResponse{}
	if rec := h.read().KVGet(nil, req.Msg.GetNamespace(), req.Msg.GetKey()); rec != nil {
		out.Entry = proto.Clone(rec.GetEntry()).(*managerv1.KvEntry)
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) KvList(ctx context.Context, req *connect.Request[managerv1.KvListRequest]) (*connect.Response[managerv1.KvListResponse], error) {
	ns := req.Msg.GetNamespace()
	if err := jobspec.ValidateKVNamespace(ns); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	r := h.read()
	out := &managerv1.KvListResponse{SchemaVersion: r.KVSchemaVersion(nil, ns), Revision: r.Index()}
	r.KVList(nil, ns, req.Msg.GetKeyPrefix(), func(rec *storev1.KvRecord) bool {
		out.Entries = append(out.Entries, proto.Clone(rec.GetEntry()).(*managerv1.KvEntry))
		return true
	})
	return connect.NewResponse(out), nil
}
