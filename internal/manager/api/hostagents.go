package api

import (
	"context"
	"net/url"
	"strings"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Cloud Hypervisor host agents registering at run time: a one-shot token
// (AddHostAgent), then the agent's registration with it, which records
// where it serves and the host secret the cloud-hypervisor provider calls
// it with (decision 0043).

func (h *Handler) AddHostAgent(ctx context.Context, req *connect.Request[managerv1.AddHostAgentRequest]) (*connect.Response[managerv1.AddHostAgentResponse], error) {
	name := req.Msg.GetName()
	if err := state.ValidateHostAgentName(name); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if c := h.cfg.CloudHypervisor; c != nil {
		if _, ok := c.Hosts[name]; ok {
			return nil, rpcerr.ToConnect(apierr.AlreadyExistsf("host %s is in config.yaml (providers.cloudHypervisor.hosts)", apierr.Quote(name)))
		}
	}
	token := auth.RandomToken(state.HostAgentTokenPrefix, 24)
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_AddHostAgent{AddHostAgent: &storev1.AddHostAgent{Name: name, Token: token}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.AddHostAgentResponse{Name: name, Token: token}), nil
}

func (h *Handler) RegisterHostAgent(ctx context.Context, req *connect.Request[managerv1.RegisterHostAgentRequest]) (*connect.Response[managerv1.RegisterHostAgentResponse], error) {
	m := req.Msg
	if err := state.ValidateHostAgentName(m.GetName()); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	if u := m.GetUrl(); !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return nil, rpcerr.ToConnect(apierr.Invalid("url", "%s is not an http(s) URL", apierr.Quote(u)))
	}
	token, _ := strings.CutPrefix(req.Header().Get("Authorization"), "Bearer ")
	if strings.HasPrefix(token, state.HostAgentSecretPrefix) {
		return h.renewHostAgent(m, token)
	}
	if !strings.HasPrefix(token, state.HostAgentTokenPrefix) {
		return nil, rpcerr.ToConnect(apierr.Unauthenticatedf("a host agent registers with its one-shot registration token (%s…)", state.HostAgentTokenPrefix))
	}
	cert, cas, err := h.hostAgentCertificate(m)
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	secret := auth.RandomToken(state.HostAgentSecretPrefix, 32)
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_RegisterHostAgent{RegisterHostAgent: &storev1.RegisterHostAgent{
		Name: m.GetName(), Token: token, Url: m.GetUrl(), Secret: secret,
	}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	h.cfg.Log.Info("host agent registered", "host", m.GetName(), "url", m.GetUrl(), "mutual_tls", cert != nil)
	return connect.NewResponse(&managerv1.RegisterHostAgentResponse{HostSecret: secret, CertificateDer: cert, CaCertificatesDer: cas}), nil
}

// renewHostAgent answers a registered agent's registration with its host
// secret: a new certificate for its CSR (the renewal before the old one
// expires). Nothing is written: the URL and the secret stay.
func (h *Handler) renewHostAgent(m *managerv1.RegisterHostAgentRequest, secret string) (*connect.Response[managerv1.RegisterHostAgentResponse], error) {
	rec := h.read().HostAgentBySecret(secret)
	switch {
	case rec == nil || rec.GetName() != m.GetName():
		return nil, rpcerr.ToConnect(apierr.Unauthenticatedf("the host secret is not host agent %s's", apierr.Quote(m.GetName())))
	case m.GetUrl() != rec.GetUrl():
		return nil, rpcerr.ToConnect(apierr.Invalid("url", "%s: a renewal keeps the registered URL %s (remove and add the host to move it)", apierr.Quote(m.GetUrl()), rec.GetUrl()))
	case len(m.GetCsrDer()) == 0:
		return nil, rpcerr.ToConnect(apierr.Invalid("csrDer", "a registered agent registers again only to renew its certificate: send a certificate request"))
	case h.cfg.CA == nil:
		return nil, rpcerr.ToConnect(apierr.FailedPreconditionf("this Manager has no cluster CA to sign host agent %s's certificate", m.GetName()))
	}
	cert, cas, err := h.hostAgentCertificate(m)
	if err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	h.cfg.Log.Info("host agent certificate renewed", "host", m.GetName())
	return connect.NewResponse(&managerv1.RegisterHostAgentResponse{HostSecret: secret, CertificateDer: cert, CaCertificatesDer: cas}), nil
}

// hostAgentCertificate signs a registering host agent's CSR with the
// cluster CA (URI SAN norsk://host/<name>, its URL's host as a SAN), as
// workerCertificate does a worker's: nil, nil without a CA or a CSR (the
// agent then serves in cleartext, on loopback only). An agent given a
// certificate serves TLS, so its URL must be https. It is signed before
// the token is checked, and answered only once the registration applied.
func (h *Handler) hostAgentCertificate(m *managerv1.RegisterHostAgentRequest) (cert []byte, cas [][]byte, err error) {
	ca := h.cfg.CA
	if ca == nil || len(m.GetCsrDer()) == 0 {
		return nil, nil, nil
	}
	u, err := url.Parse(m.GetUrl())
	if err != nil || u.Scheme != "https" {
		return nil, nil, apierr.Invalid("url", "%s: an agent sending a certificate request serves mutual TLS; advertise an https:// URL", apierr.Quote(m.GetUrl()))
	}
	der, err := pki.SignHostAgentCSR(ca, m.GetCsrDer(), m.GetName(), u.Hostname(), 0)
	if err != nil {
		return nil, nil, apierr.Invalid("csrDer", "%v", err)
	}
	return der, [][]byte{ca.Cert.Raw}, nil
}

func (h *Handler) ListHostAgents(ctx context.Context, _ *connect.Request[managerv1.ListHostAgentsRequest]) (*connect.Response[managerv1.ListHostAgentsResponse], error) {
	out := &managerv1.ListHostAgentsResponse{}
	for _, r := range h.read().HostAgents() {
		out.HostAgents = append(out.HostAgents, &managerv1.RegisteredHostAgent{Name: r.GetName(), Url: r.GetUrl(), Registered: r.GetTokenUsed(),
			CreatedAt: r.GetCreatedAt(), RegisteredAt: r.GetRegisteredAt()})
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) RemoveHostAgent(ctx context.Context, req *connect.Request[managerv1.RemoveHostAgentRequest]) (*connect.Response[managerv1.RemoveHostAgentResponse], error) {
	if _, err := h.apply(ctx, &storev1.Command{Cmd: &storev1.Command_RemoveHostAgent{RemoveHostAgent: &storev1.RemoveHostAgent{Name: req.Msg.GetName()}}}); err != nil {
		return nil, rpcerr.ToConnect(err)
	}
	return connect.NewResponse(&managerv1.RemoveHostAgentResponse{}), nil
}
