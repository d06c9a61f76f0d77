package api

import (
	"context"
	"io"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

func (h *Handler) GetStoreInfo(ctx context.Context, req *connect.Request[managerv1.GetStoreInfoRequest]) (*connect.Response[managerv1.StoreInfo], error) {
	r := h.read()
	out := &managerv1.StoreInfo{
		Stores: []*managerv1.StoreSchema{{
			Name: "state", SchemaVersion: r.SchemaVersion(), BinarySchemaVersion: state.SchemaVersion,
		}},
		Boot:         proto.Clone(h.cfg.Boot).(*managerv1.BootReport),
		AppliedIndex: r.Index(),
		DataDir:      h.cfg.DataDir,
	}
	backups, err := store.ListBackups(h.cfg.BackupDir)
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	for _, b := range backups {
		bi := &managerv1.BackupInfo{
			Path: b.Path, Index: b.Index, CreatedAt: timestamppb.New(b.CreatedAt), Bytes: uint64(b.Bytes), Reason: b.Reason,
		}
		if hdr, err := store.SnapshotFileHeader(b.Path); err == nil {
			bi.SchemaVersion = hdr.GetSchemaVersion()
		}
		out.Backups = append(out.Backups, bi)
	}
	return connect.NewResponse(out), nil
}

// snapshotChunk is the size of a SnapshotSave message.
const snapshotChunk = 256 << 10

func (h *Handler) SnapshotSave(ctx context.Context, req *connect.Request[managerv1.SnapshotSaveRequest], stream *connect.ServerStream[managerv1.SnapshotChunk]) error {
	r := h.read() // a consistent view: later writes do not show
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := r.WriteTo(pw)
		_ = pw.CloseWithError(err)
	}()
	defer func() {
		_ = pr.CloseWithError(context.Canceled) // unblocks the writer if we stop early
		<-done
	}()
	buf := make([]byte, snapshotChunk)
	for {
		n, err := io.ReadFull(pr, buf)
		if n > 0 {
			if serr := stream.Send(&managerv1.SnapshotChunk{Data: append([]byte(nil), buf[:n]...)}); serr != nil {
				return serr
			}
		}
		switch err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			h.cfg.Log.Info("snapshot saved by an operator", "index", r.Index())
			return nil
		default:
			return rpcerr.ToConnect(err)
		}
	}
}
