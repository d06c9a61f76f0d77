package hostagent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/pkg/certpin"
)

// secretFile keeps the host secret the Manager gave at registration.
const secretFile = "host-secret"

// Registration is how an agent registers with the Manager the way a
// worker does: once, with the one-shot token `norsk-ctl host-agent add`
// made; the Manager answers the host secret it will call the agent with,
// which the agent keeps (Dir/host-secret) and uses from then on.
type Registration struct {
	// ManagerURLs are the Manager members' URLs (tried in order).
	ManagerURLs []string
	// Token is the one-shot registration token ("nht_…").
	Token string
	// AdvertiseURL is where the Manager reaches the agent ("" =
	// https://<the listen address> when registering with an https Manager,
	// which answers the agent's certificate; http://… otherwise).
	AdvertiseURL string
	// TLS verifies an https Manager (a CA file or pin; empty: the system's
	// roots).
	TLS certpin.Options
}

// secret resolves the agent's bearer token: the configured one, else the
// kept host secret, else a registration now (whose secret is kept).
func (a *Agent) secret(ctx context.Context, listen string) (string, error) {
	if a.cfg.Token != "" {
		return a.cfg.Token, nil
	}
	path := filepath.Join(a.cfg.Dir, secretFile)
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("host-agent: %w", err)
	}
	reg := a.cfg.Register
	if reg == nil || reg.Token == "" {
		return "", errors.New("host-agent: no token: give the host secret (--token-file), or a registration token from 'norsk-ctl host-agent add' with the Manager's URL")
	}
	// An https Manager has a cluster CA: the agent asks it for a
	// certificate and serves mutual TLS with it.
	var csr []byte
	if reg.https() {
		csr = a.served.CSR()
	}
	url, err := reg.url(listen, csr != nil)
	if err != nil {
		return "", err
	}
	res, m, err := a.register(ctx, reg, reg.Token, url, csr)
	if err != nil {
		return "", fmt.Errorf("host-agent: register with the Manager: %w", err)
	}
	secret := res.GetHostSecret()
	if err := a.takeCertificate(res, csr != nil); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("host-agent: keep the host secret: %w", err)
	}
	a.log.Info("host-agent: registered with the Manager", "manager", m, "url", url, "mutual_tls", a.served.Serving())
	return secret, nil
}

// url is the URL the agent registers (and renews) with: AdvertiseURL, else
// http(s)://listen; https when tls (the agent asks for a certificate).
func (r *Registration) url(listen string, tls bool) (string, error) {
	url := r.AdvertiseURL
	switch {
	case url == "" && tls:
		url = "https://" + listen
	case url == "":
		url = "http://" + listen
	case tls && !strings.HasPrefix(url, "https://"):
		return "", fmt.Errorf("host-agent: --advertise-url %s: registering with an https Manager, the agent serves mutual TLS; advertise https://", url)
	}
	return url, nil
}

// register calls RegisterHostAgent on each Manager member in turn with
// bearer (the one-shot token, or the host secret to renew), until one
// answers; an UNAUTHENTICATED or INVALID_ARGUMENT answer ends the round
// (another member answers the same). It returns the answer and the member.
func (a *Agent) register(ctx context.Context, reg *Registration, bearer, url string, csr []byte) (*managerv1.RegisterHostAgentResponse, string, error) {
	hc := &http.Client{Timeout: 30 * time.Second}
	if tc, err := certpin.ClientConfig(reg.TLS); err != nil {
		return nil, "", fmt.Errorf("the Manager's TLS: %w", err)
	} else if tc != nil {
		tr := &http.Transport{TLSClientConfig: tc}
		defer tr.CloseIdleConnections()
		hc.Transport = tr
	}
	var errs []error
	for _, m := range reg.ManagerURLs {
		c := managerv1connect.NewManagerClient(hc, strings.TrimRight(m, "/"))
		req := connect.NewRequest(&managerv1.RegisterHostAgentRequest{Name: a.cfg.Name, Url: url, CsrDer: csr})
		req.Header().Set("Authorization", "Bearer "+bearer)
		res, err := c.RegisterHostAgent(ctx, req)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m, err))
			if code := connect.CodeOf(err); code == connect.CodeUnauthenticated || code == connect.CodeInvalidArgument {
				break // another member answers the same
			}
			continue
		}
		return res.Msg, m, nil
	}
	return nil, "", errors.Join(errs...)
}

// renewTLS registers again with the host secret once two thirds of the
// certificate's lifetime have passed, and serves the new certificate, so an
// agent running for months never serves an expired one. It needs the
// Managers' https URLs (Register); it ends with ctx.
func (a *Agent) renewTLS(ctx context.Context) {
	reg := a.cfg.Register
	for {
		wait := renewRecheck
		if c, _ := a.served.State(); c != nil && c.Leaf != nil {
			life := c.Leaf.NotAfter.Sub(c.Leaf.NotBefore)
			due := c.Leaf.NotBefore.Add(life * 2 / 3)
			wait = min(max(due.Sub(a.cfg.Clock.Now()), 0), renewRecheck)
			if wait == 0 {
				wait = renewRetry
				err := a.renew(ctx, reg)
				a.metrics.renew.WithLabelValues(map[bool]string{true: "ok", false: "failed"}[err == nil]).Inc()
				if err != nil {
					a.log.Warn("host-agent: cannot renew the TLS certificate; trying again", "expires", c.Leaf.NotAfter, "err", err)
				} else {
					continue
				}
			}
		}
		t := a.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// renew asks the Manager for a new certificate with the host secret.
func (a *Agent) renew(ctx context.Context, reg *Registration) error {
	url, err := reg.url(a.ln.Addr().String(), true)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, m, err := a.register(rctx, reg, a.cfg.Token, url, a.served.CSR())
	if err != nil {
		return err
	}
	if err := a.takeCertificate(res, true); err != nil {
		return err
	}
	a.log.Info("host-agent: TLS certificate renewed", "manager", m)
	return nil
}

// The renewal loop's pace: how long it sleeps at most before looking at
// the certificate again, and after a failed renewal.
const (
	renewRecheck = time.Hour
	renewRetry   = time.Minute
)

// https reports whether the Managers are reached over https (they then
// have a cluster CA that signs the agent's certificate).
func (r *Registration) https() bool {
	for _, u := range r.ManagerURLs {
		if !strings.HasPrefix(u, "https://") {
			return false
		}
	}
	return len(r.ManagerURLs) > 0
}

// takeCertificate takes the certificate a registration answered: checked
// (the agent's key, the CA it came with, norsk://host/<name>), kept in
// Dir/tls and served from the first connection on. asked says a CSR was
// sent: an answer without a certificate is then an error (the agent
// advertised https).
func (a *Agent) takeCertificate(res *managerv1.RegisterHostAgentResponse, asked bool) error {
	if len(res.GetCertificateDer()) == 0 {
		if asked {
			return errors.New("host-agent: the Manager answered no certificate for the agent's request (has it no cluster CA?)")
		}
		return nil
	}
	cert, err := a.served.Accept(res.GetCertificateDer(), res.GetCaCertificatesDer(), func(c *x509.Certificate) error {
		if name, ok := pki.HostAgentOf(c); !ok || name != a.cfg.Name {
			return fmt.Errorf("the certificate names host %q, not %q", name, a.cfg.Name)
		}
		return nil
	})
	if cert == nil {
		return fmt.Errorf("host-agent: the Manager's certificate: %w", err)
	}
	if err != nil {
		a.log.Warn("host-agent: serving the Manager's certificate, but cannot keep it for the next start", "err", err)
	}
	a.log.Info("host-agent: certificate from the cluster CA", "expires", cert.NotAfter, "ca", pki.Fingerprint(res.GetCaCertificatesDer()[0]))
	return nil
}
