package manager

import (
	"context"
	"fmt"
	"path/filepath"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

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
