package api

import (
	"context"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/cluster"
)

// askPrimaryTimeout bounds a follower's question to the primary.
const askPrimaryTimeout = 2 * time.Second

// askPrimary, on a follower of a cluster, makes call against the primary
// (the caller's credential travels with it) and returns its answer; ok is
// false on the primary, standalone, with no primary known, for a call a
// member already passed on, or when the primary could not be reached (the
// caller then answers from this member's copy). The primary's refusal of
// the caller (UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED) is
// the answer.
func askPrimary[T any](ctx context.Context, hd *Handler, h http.Header, call func(context.Context, managerv1connect.ManagerClient) (*connect.Response[T], error)) (out *connect.Response[T], ok bool, err error) {
	return askPrimaryFor(ctx, hd, h, call, func(err error) bool {
		switch connect.CodeOf(err) {
		case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeResourceExhausted:
			return true
		}
		return false
	})
}

// askPrimaryFor is askPrimary where answers says which errors from the
// primary are its answer (the others make the caller answer from this
// member's copy).
func askPrimaryFor[T any](ctx context.Context, hd *Handler, h http.Header, call func(context.Context, managerv1connect.ManagerClient) (*connect.Response[T], error),
	answers func(error) bool) (out *connect.Response[T], ok bool, err error) {
	st := hd.b.Store()
	if !hd.cfg.Clustered || st == nil || st.IsLeader() || h.Get(cluster.AskedHeader) != "" {
		return nil, false, nil
	}
	leader, _ := st.Leader()
	url := hd.b.MemberAPI(leader)
	if leader == "" || url == "" {
		return nil, false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, askPrimaryTimeout)
	defer cancel()
	out, err = call(cctx, hd.b.ManagerClient(url))
	if err != nil && answers(err) {
		return nil, true, err
	}
	if err != nil {
		hd.cfg.Log.Debug("asking the primary failed; answering from this member's copy", "primary", leader, "err", err)
		return nil, false, nil
	}
	return out, true, nil
}
