package hostagent

import (
	"context"
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
	// http://<the listen address>).
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
	url := reg.AdvertiseURL
	if url == "" {
		url = "http://" + listen
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	if tc, err := certpin.ClientConfig(reg.TLS); err != nil {
		return "", fmt.Errorf("host-agent: the Manager's TLS: %w", err)
	} else if tc != nil {
		hc.Transport = &http.Transport{TLSClientConfig: tc}
	}
	var errs []error
	for _, m := range reg.ManagerURLs {
		c := managerv1connect.NewManagerClient(hc, strings.TrimRight(m, "/"))
		req := connect.NewRequest(&managerv1.RegisterHostAgentRequest{Name: a.cfg.Name, Url: url})
		req.Header().Set("Authorization", "Bearer "+reg.Token)
		res, err := c.RegisterHostAgent(ctx, req)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m, err))
			if code := connect.CodeOf(err); code == connect.CodeUnauthenticated || code == connect.CodeInvalidArgument {
				break // another member answers the same
			}
			continue
		}
		secret := res.Msg.GetHostSecret()
		if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("host-agent: keep the host secret: %w", err)
		}
		a.log.Info("host-agent: registered with the Manager", "manager", m, "url", url)
		return secret, nil
	}
	return "", fmt.Errorf("host-agent: register with the Manager: %w", errors.Join(errs...))
}
