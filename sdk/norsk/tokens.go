package norsk

import (
	"context"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// ApiToken is an API token's metadata (its secret is shown once, by
// CreateToken).
type ApiToken = managerv1.ApiToken

// Token roles (pkg/jobspec lists the roles the Manager accepts).
const (
	RoleAdmin     = jobspec.RoleAdmin
	RoleOperator  = jobspec.RoleOperator
	RoleReadOnly  = jobspec.RoleReadOnly
	RoleWorker    = jobspec.RoleWorker
	RolePublisher = jobspec.RolePublisher
)

// CreateToken makes an API token with a role (admin, operator, read-only,
// worker or publisher) that expires after ttl (0 = never). It returns the
// token's metadata and its bearer string, which the Manager shows only now
// and keeps only as a hash. Admin only. Errors: ErrInvalidArgument (name,
// role, ttl), ErrPermissionDenied.
func (m *Manager) CreateToken(ctx context.Context, name, role string, ttl time.Duration) (*ApiToken, string, error) {
	const op = "CreateToken"
	if err := m.alive(op); err != nil {
		return nil, "", err
	}
	res, err := m.client.CreateToken(ctx, connect.NewRequest(&managerv1.CreateTokenRequest{
		Name: name, Role: role, TtlS: int64(ttl / time.Second),
	}))
	if err != nil {
		return nil, "", wrapError(op, err)
	}
	return res.Msg.GetToken(), res.Msg.GetSecret(), nil
}

// ListTokens lists every API token's metadata (no secrets). Admin only.
func (m *Manager) ListTokens(ctx context.Context) ([]*ApiToken, error) {
	const op = "ListTokens"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.ListTokens(ctx, connect.NewRequest(&managerv1.ListTokensRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetTokens(), nil
}

// RevokeToken revokes an API token at once. Admin only. Errors: ErrNotFound,
// ErrFailedPrecondition (revoking the token making the call).
func (m *Manager) RevokeToken(ctx context.Context, id string) error {
	const op = "RevokeToken"
	if err := m.alive(op); err != nil {
		return err
	}
	_, err := m.client.RevokeToken(ctx, connect.NewRequest(&managerv1.RevokeTokenRequest{Id: id}))
	return wrapError(op, err)
}
