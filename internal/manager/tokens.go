package manager

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// maxTokenTTLSeconds bounds a token's lifetime (100 years): a longer one
// would overflow a time.Duration; 0 is the way to say "never expires".
const maxTokenTTLSeconds = 100 * 365 * 24 * 3600

func (h *handler) CreateToken(ctx context.Context, req *connect.Request[managerv1.CreateTokenRequest]) (*connect.Response[managerv1.CreateTokenResponse], error) {
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
		tok.ExpiresAt = timestamppb.New(h.s.cfg.Clock.Now().Add(time.Duration(ttl) * time.Second))
	}
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_CreateToken{CreateToken: &storev1.CreateToken{Token: tok, SecretHash: hash}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	rec := h.read().Token(id)
	return connect.NewResponse(&managerv1.CreateTokenResponse{Token: proto.Clone(rec.GetToken()).(*managerv1.ApiToken), Secret: bearer}), nil
}

func (h *handler) ListTokens(ctx context.Context, req *connect.Request[managerv1.ListTokensRequest]) (*connect.Response[managerv1.ListTokensResponse], error) {
	out := &managerv1.ListTokensResponse{}
	for _, rec := range h.read().Tokens() {
		out.Tokens = append(out.Tokens, proto.Clone(rec.GetToken()).(*managerv1.ApiToken))
	}
	return connect.NewResponse(out), nil
}

func (h *handler) RevokeToken(ctx context.Context, req *connect.Request[managerv1.RevokeTokenRequest]) (*connect.Response[managerv1.RevokeTokenResponse], error) {
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

// bootstrapToken makes the first admin token of a store that has none: the
// given one (tests and dev mode choose theirs) or a new one. It returns the
// bearer string, to be shown once; "" when the store already has tokens.
func (s *Server) bootstrapToken(ctx context.Context, st *store.Store) (string, error) {
	if len(st.State().Snapshot().Tokens()) > 0 {
		return "", nil
	}
	var id, bearer, hash string
	if s.cfg.BootstrapToken != "" {
		var err error
		if id, hash, err = auth.ParseToken(s.cfg.BootstrapToken); err != nil {
			return "", fmt.Errorf("bootstrap token: %w", err)
		}
		bearer = s.cfg.BootstrapToken
	} else {
		id, bearer, hash = auth.MintToken()
	}
	cmd := &storev1.Command{
		Time:  timestamppb.New(s.cfg.Clock.Now()),
		Audit: &storev1.AuditStamp{Who: "manager", Method: "BootstrapToken", Target: "token/" + id, Source: state.AuditSourceManager},
		Cmd: &storev1.Command_CreateToken{CreateToken: &storev1.CreateToken{
			Token:      &managerv1.ApiToken{Id: id, Name: "bootstrap", Role: state.RoleAdmin, CreatedBy: "manager"},
			SecretHash: hash,
		}},
	}
	if _, err := st.Apply(ctx, cmd); err != nil {
		return "", fmt.Errorf("bootstrap token: %w", err)
	}
	return bearer, nil
}

// RecoverAdminToken makes a new admin token in the store of a member that is
// not running (every admin token lost) and returns it. The store must exist.
func RecoverAdminToken(ctx context.Context, cfg Config, name string) (string, error) {
	if err := cfg.defaults(); err != nil {
		return "", err
	}
	if err := jobspec.ValidateTokenRequest(name, state.RoleAdmin, 0); err != nil {
		return "", err
	}
	member := MemberName(cfg.DataDir)
	if member == "" {
		return "", fmt.Errorf("%s holds no Manager store", cfg.DataDir)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	st, err := store.Open(ctx, store.Config{Dir: filepath.Join(cfg.DataDir, "raft"), MemberID: member, Logger: cfg.Logger})
	if err != nil {
		return "", err
	}
	defer st.Close()
	id, bearer, hash := auth.MintToken()
	cmd := &storev1.Command{
		Time:  timestamppb.New(cfg.Clock.Now()),
		Audit: &storev1.AuditStamp{Who: "operator at the console (norsk-manager token bootstrap)", Method: "RecoverAdminToken", Target: "token/" + id, Source: state.AuditSourceManager},
		Cmd: &storev1.Command_CreateToken{CreateToken: &storev1.CreateToken{
			Token:      &managerv1.ApiToken{Id: id, Name: name, Role: state.RoleAdmin, CreatedBy: "norsk-manager token bootstrap"},
			SecretHash: hash,
		}},
	}
	if _, err := st.Apply(ctx, cmd); err != nil {
		return "", err
	}
	return bearer, nil
}
