package state

import (
	"crypto/subtle"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// HostAgentTokenPrefix starts a host agent's one-shot registration token.
const HostAgentTokenPrefix = "nht_"

// HostAgentSecretPrefix starts a host secret (stamped at registration).
const HostAgentSecretPrefix = "nhs_"

var hostAgentNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// ValidateHostAgentName checks a host agent's name: a DNS label (it is the
// cloud-hypervisor provider's region).
func ValidateHostAgentName(name string) error {
	if !hostAgentNameRE.MatchString(name) {
		return apierr.Invalid("name", "%q is not a host name (a DNS label: a-z, 0-9, '-', '.')", name)
	}
	return nil
}

// HostAgentBySecret returns the registered host agent whose host secret
// is secret, or nil (compared in constant time).
func (r *Read) HostAgentBySecret(secret string) *storev1.HostAgentRecord {
	if secret == "" {
		return nil
	}
	for _, h := range r.HostAgents() {
		if h.GetTokenUsed() && subtle.ConstantTimeCompare([]byte(h.GetSecret()), []byte(secret)) == 1 {
			return h
		}
	}
	return nil
}

// HostAgent returns a host agent's record, or nil.
func (r *Read) HostAgent(name string) *storev1.HostAgentRecord {
	if raw := r.first(nil, tableHostAgents, "id", name); raw != nil {
		return raw.(*storev1.HostAgentRecord)
	}
	return nil
}

// HostAgentByToken returns the host agent whose registration token is
// token, or nil.
func (r *Read) HostAgentByToken(token string) *storev1.HostAgentRecord {
	for _, h := range r.HostAgents() {
		if h.GetToken() == token {
			return h
		}
	}
	return nil
}

// HostAgents returns every host agent, by name.
func (r *Read) HostAgents() []*storev1.HostAgentRecord {
	var out []*storev1.HostAgentRecord
	it := r.iter(nil, tableHostAgents, "id_prefix", "")
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*storev1.HostAgentRecord))
	}
	return out
}

func (t *tx) addHostAgent(c *storev1.AddHostAgent) error {
	if err := ValidateHostAgentName(c.GetName()); err != nil {
		return err
	}
	if !strings.HasPrefix(c.GetToken(), HostAgentTokenPrefix) || len(c.GetToken()) < len(HostAgentTokenPrefix)+16 {
		return apierr.New(apierr.Internal, "add host agent: no registration token stamped")
	}
	if t.read().HostAgent(c.GetName()) != nil {
		return apierr.AlreadyExistsf("host agent %q exists (remove it first to register it again)", c.GetName())
	}
	t.insert(tableHostAgents, &storev1.HostAgentRecord{Name: c.GetName(), Token: c.GetToken(), CreatedAt: t.now})
	return nil
}

func (t *tx) registerHostAgent(c *storev1.RegisterHostAgent) error {
	rec := t.read().HostAgent(c.GetName())
	switch {
	case rec == nil || rec.GetToken() != c.GetToken():
		return apierr.Unauthenticatedf("the registration token is not host agent %s's", apierr.Quote(c.GetName()))
	case rec.GetTokenUsed():
		return apierr.Unauthenticatedf("host agent %s's registration token has already been used", apierr.Quote(c.GetName()))
	case c.GetSecret() == "":
		return apierr.New(apierr.Internal, "register host agent: no secret stamped")
	case !strings.HasPrefix(c.GetUrl(), "http://") && !strings.HasPrefix(c.GetUrl(), "https://"):
		return apierr.Invalid("url", "%q is not an http(s) URL", c.GetUrl())
	}
	next := proto.Clone(rec).(*storev1.HostAgentRecord)
	next.TokenUsed, next.Url, next.Secret, next.RegisteredAt = true, c.GetUrl(), c.GetSecret(), t.now
	t.insert(tableHostAgents, next)
	return nil
}

func (t *tx) removeHostAgent(c *storev1.RemoveHostAgent) error {
	if t.read().HostAgent(c.GetName()) == nil {
		return apierr.NotFoundf("no host agent %q", c.GetName())
	}
	t.delete(tableHostAgents, t.read().HostAgent(c.GetName()))
	return nil
}
