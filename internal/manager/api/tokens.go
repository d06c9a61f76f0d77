package api

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

func (h *Handler) CreateToken(ctx context.Context, req *connect.Request[managerv1.CreateTokenRequest]) (*connect.Response[managerv1.CreateTokenResponse], error) {
	m := req.Msg
	if err := jobspec.ValidateTokenRequest(m.GetName(), m.GetRole(), m.GetTtlS()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if m.GetTtlS() > maxTokenTTLSeconds {
		return nil, rpcerr.ToConnect(apierr.Invalid("ttlS", "%d is more than 100 years (%d s); use 0 for a token that never expires", m.GetTtlS(), int64(maxTokenTTLSeconds)))
	}
	id, bearer, hash := auth.MintToken()
	tok := &managerv1.ApiToken{Id: id, Name: m.GetName(), Role: m.GetRole()}
	if caller, ok := auth.CallerOf(ctx); ok {
		tok.CreatedBy = caller.Name
	}
	if ttl := m.GetTtlS(); ttl > 0 {
		tok.ExpiresAt = timestamppb.New(h.cfg.Clock.Now().Add(time.Duration(ttl) * time.Second))
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_CreateToken{CreateToken: &storev1.CreateToken{Token: tok, SecretHash: hash}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	rec := h.read().Token(id)
	return connect.NewResponse(&managerv1.CreateTokenResponse{Token: proto.Clone(rec.GetToken()).(*managerv1.ApiToken), Secret: bearer}), nil
}

func (h *Handler) ListTokens(ctx context.Context, req *connect.Request[managerv1.ListTokensRequest]) (*connect.Response[managerv1.ListTokensResponse], error) {
	out := &managerv1.ListTokensResponse{}
	for _, rec := range h.read().Tokens() {
		out.Tokens = append(out.Tokens, proto.Clone(rec.GetToken()).(*managerv1.ApiToken))
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) RevokeToken(ctx context.Context, req *connect.Request[managerv1.RevokeTokenRequest]) (*connect.Response[managerv1.RevokeTokenResponse], error) {
	id := req.Msg.GetId()
	if h.read().Token(id) == nil {
		return nil, rpcerr.ToConnect(apierr.NotFoundf("no token %s", apierr.Quote(id)))
	}
	if caller, ok := auth.CallerOf(ctx); ok && caller.Key == "t:"+id {
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("token %s is the one making this call; revoke it with another admin token", id))
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_RevokeToken{RevokeToken: &storev1.RevokeToken{Id: id}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.RevokeTokenResponse{}), nil
}

// maxTokenTTLSeconds bounds a token's lifetime (100 years): a longer one
// would overflow a time.Duration; 0 is the way to say "never expires".
const maxTokenTTLSeconds = 100 * 365 * 24 * 3600
