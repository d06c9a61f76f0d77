package manager

import (
	"context"

	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/automanager"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
	"github.com/norsk-go/norsk-manager/internal/nodes"
	"github.com/norsk-go/norsk-manager/internal/providers"
	"github.com/norsk-go/norsk-manager/internal/providers/mock"
	"github.com/norsk-go/norsk-manager/internal/store"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// backend is the Server as the API handlers see it (api.Backend).
type backend struct{ s *Server }

var _ api.Backend = backend{}

func (b backend) Apply(ctx context.Context, cmd *storev1.Command) (state.Result, error) {
	return b.s.member.Apply(ctx, cmd)
}
func (b backend) Store() *store.Store                     { return b.s.st() }
func (b backend) Controller() *nodes.Controller           { return b.s.controller() }
func (b backend) Fleet() *providers.Fleet                 { return b.s.fleet }
func (b backend) MockProvider() *mock.Provider            { return b.s.mockProvider() }
func (b backend) PlacementConfig() placement.Config       { return b.s.placementConfig() }
func (b backend) ElasticTiers() []automanager.ElasticTier { return b.s.elasticTiers() }
func (b backend) CAFingerprint() string                   { return b.s.CAFingerprint() }
func (b backend) AuditVerdict() (bool, string)            { return b.s.auditVerdict() }
func (b backend) MemberAPI(name string) string            { return b.s.member.MemberAPI(name) }
func (b backend) ManagerClient(url string) managerv1connect.ManagerClient {
	return b.s.member.ManagerClient(url)
}
