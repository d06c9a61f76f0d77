package api_test

import (
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
	"github.com/norsk-go/norsk-manager/internal/providers/cloudconf"
)

// TestHostAgentHandlers: adding host agents over a fake backend; a host
// config.yaml names is refused.
func TestHostAgentHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) {
		c.CloudHypervisor = &cloudconf.CloudHypervisor{Hosts: map[string]cloudconf.CloudHypervisorHost{"hv-config": {}}}
	})
	h := e.h
	e.run(t, []hcase{
		{name: "AddHostAgent/BadName", do: call(h.AddHostAgent, &managerv1.AddHostAgentRequest{Name: "Not A Host"}),
			code: connect.CodeInvalidArgument, names: []string{"name:"}},
		{name: "AddHostAgent/Configured", do: call(h.AddHostAgent, &managerv1.AddHostAgentRequest{Name: "hv-config"}),
			code: connect.CodeAlreadyExists, names: []string{`"hv-config"`}},
		{name: "AddHostAgent/Good", do: call(h.AddHostAgent, &managerv1.AddHostAgentRequest{Name: "hv-1"}),
			check: func(t *testing.T, resp proto.Message, writes []*storev1.Command) {
				w := oneWrite(t, writes, func(c *storev1.Command) *storev1.AddHostAgent { return c.GetAddHostAgent() })
				if w.GetName() != "hv-1" || w.GetToken() == "" || resp.(*managerv1.AddHostAgentResponse).GetToken() != w.GetToken() {
					t.Errorf("wrote %v, answered %v; want hv-1 with the token the handler made, answered", w, resp)
				}
			}},
	})
}
