package api_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// TestDiscoveryHandlers: the discovery fleet and its tier-secret rotation
// over a fake backend.
func TestDiscoveryHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	h := e.h
	secret := strings.Repeat("s", 32)
	e.run(t, []hcase{
		{name: "PublishDiscoveryFleet/NoFleet", do: call(h.PublishDiscoveryFleet, &managerv1.PublishDiscoveryFleetRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"fleet:"}},
		{name: "PublishDiscoveryFleet/SecretIsLeaf", do: call(h.PublishDiscoveryFleet, &managerv1.PublishDiscoveryFleetRequest{Fleet: &managerv1.DiscoveryFleet{
			Addresses: []string{"d1:443"}, LeafToken: secret, TierSecret: secret}}),
			code: connect.CodeInvalidArgument, names: []string{"fleet.tierSecret:"}},
		{name: "PublishDiscoveryFleet/ShortSecret", do: call(h.PublishDiscoveryFleet, &managerv1.PublishDiscoveryFleetRequest{Fleet: &managerv1.DiscoveryFleet{
			Addresses: []string{"d1:443"}, LeafToken: "leaf", TierSecret: "short"}}),
			code: connect.CodeInvalidArgument, names: []string{"fleet.tierSecret:", "at least 32"}},
		{name: "PublishDiscoveryFleet/Good", do: call(h.PublishDiscoveryFleet, &managerv1.PublishDiscoveryFleetRequest{Fleet: &managerv1.DiscoveryFleet{
			Addresses: []string{"d1:443"}, LeafToken: "leaf", TierSecret: secret, RotationPhase: "ignored"}}),
			want: []*storev1.Command{{Cmd: &storev1.Command_PublishDiscovery{PublishDiscovery: &storev1.PublishDiscovery{Fleet: &managerv1.DiscoveryFleet{
				Addresses: []string{"d1:443"}, LeafToken: "leaf", TierSecret: secret}}}}}},
		{name: "RotateDiscoveryTierSecret/UnknownStep", do: call(h.RotateDiscoveryTierSecret, &managerv1.RotateDiscoveryTierSecretRequest{Step: "spin"}),
			code: connect.CodeInvalidArgument, names: []string{"step:", `"spin"`}},
		{name: "RotateDiscoveryTierSecret/SecretOnFlip", do: call(h.RotateDiscoveryTierSecret, &managerv1.RotateDiscoveryTierSecretRequest{Step: "flip", NewTierSecret: secret}),
			code: connect.CodeInvalidArgument, names: []string{"newTierSecret:"}},
		{name: "RotateDiscoveryTierSecret/StageMakesASecret", do: call(h.RotateDiscoveryTierSecret, &managerv1.RotateDiscoveryTierSecretRequest{Step: "stage"}),
			check: func(t *testing.T, _ proto.Message, writes []*storev1.Command) {
				w := oneWrite(t, writes, func(c *storev1.Command) *storev1.RotateDiscovery { return c.GetRotateDiscovery() })
				if w.GetStep() != "stage" || !strings.HasPrefix(w.GetNewTierSecret(), "nts_") || len(w.GetNewTierSecret()) < 4+64 {
					t.Errorf("wrote %v; want a stage with a tier secret the handler made (nts_ and 256 bits)", w)
				}
			}},
	})
}
