package cluster

import (
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
)

// AskedHeader marks a call a follower passed to the primary, so that two
// members that each think the other leads do not pass it back and forth.
const AskedHeader = "Norsk-Asked-By-Member"

// WithAuth copies the caller's credential onto a call passed on to the
// primary, marked as passed on (AskedHeader).
func WithAuth[T, U any](from *connect.Request[T], to *connect.Request[U]) *connect.Request[U] {
	to.Header().Set(auth.AuthorizationHeader, from.Header().Get(auth.AuthorizationHeader))
	to.Header().Set(AskedHeader, "1")
	return to
}

// clients caches the clients of the other members, one per URL, over one
// HTTP client.
type clients struct {
	once    sync.Once
	hc      *http.Client
	mu      sync.Mutex
	members map[string]managerv1connect.MembersClient
	manager map[string]managerv1connect.ManagerClient
}

// httpClient is the HTTP client members call each other with.
func (m *Member) httpClient() *http.Client {
	c := &m.clients
	c.once.Do(func() {
		c.hc = m.cfg.HTTPClient
		if c.hc == nil {
			c.hc = HTTPClient(m.cfg.CA)
		}
	})
	return c.hc
}

// cached is the client of url in byURL, made with mk the first time.
func cached[C any](m *Member, byURL *map[string]C, url string, mk func(connect.HTTPClient, string, ...connect.ClientOption) C) C {
	hc := m.httpClient()
	m.clients.mu.Lock()
	defer m.clients.mu.Unlock()
	if *byURL == nil {
		*byURL = map[string]C{}
	}
	c, ok := (*byURL)[url]
	if !ok {
		c = mk(hc, url, connect.WithGRPC())
		(*byURL)[url] = c
	}
	return c
}

// memberClient is the Members client for a member's API URL.
func (m *Member) memberClient(url string) managerv1connect.MembersClient {
	return cached(m, &m.clients.members, url, managerv1connect.NewMembersClient)
}

// ManagerClient is a Manager client for another member's API URL (a call
// passed on with its caller's credential: WithAuth).
func (m *Member) ManagerClient(url string) managerv1connect.ManagerClient {
	return cached(m, &m.clients.manager, url, managerv1connect.NewManagerClient)
}

// MemberAPI is the API URL of member name ("" if unknown).
func (m *Member) MemberAPI(name string) string {
	if st := m.Store(); st != nil {
		if mr := st.State().Snapshot().Member(name); mr != nil && mr.GetApiUrl() != "" {
			return mr.GetApiUrl()
		}
	}
	if n, ok := FindNode(m.cfg.Nodes, name); ok {
		return n.API
	}
	return ""
}

// newMemberRequest is a Members call carrying the cluster secret.
func newMemberRequest[T any](m *Member, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set(auth.AuthorizationHeader, auth.BearerPrefix+auth.ClusterSecretPrefix+m.cfg.Secret)
	return req
}
