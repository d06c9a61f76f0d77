package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
)

// registrar makes the nodes' ClusterMemberRegister calls, moving to the
// next Manager URL after a failure.
type registrar struct {
	hc      *http.Client
	mu      sync.Mutex
	urls    []string
	next    int
	clients map[string]managerv1connect.ManagerClient
}

func newRegistrar(urls []string) *registrar {
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Protocols = &p
	r := &registrar{hc: &http.Client{Transport: tr}, clients: map[string]managerv1connect.ManagerClient{}}
	for _, u := range urls {
		r.urls = append(r.urls, strings.TrimRight(u, "/"))
	}
	return r
}

func (r *registrar) client() (managerv1connect.ManagerClient, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.urls[r.next]
	c := r.clients[u]
	if c == nil {
		c = managerv1connect.NewManagerClient(r.hc, u, connect.WithGRPC())
		r.clients[u] = c
	}
	return c, u
}

func (r *registrar) rotate() {
	r.mu.Lock()
	r.next = (r.next + 1) % len(r.urls)
	r.mu.Unlock()
}

func (r *registrar) close() { r.hc.CloseIdleConnections() }

// ErrTokenRefused is the Manager's refusal of a slot token (unknown, or
// used: a registration retried after one whose answer was lost): retrying
// with it cannot help.
var ErrTokenRefused = errors.New("sim: the Manager refused the slot token")

// registerUntil registers, retrying every failure but a refusal of the
// token (with a jittered backoff up to 2 s) until ctx ends.
func (r *registrar) registerUntil(ctx context.Context, req *managerv1.ClusterMemberRegisterRequest) (*managerv1.ClusterMemberRegisterResponse, error) {
	wait := 50 * time.Millisecond
	for {
		c, u := r.client()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		creq := connect.NewRequest(req)
		creq.Header().Set("Authorization", "Bearer "+req.GetToken())
		resp, err := c.ClusterMemberRegister(cctx, creq)
		cancel()
		if err == nil {
			return resp.Msg, nil
		}
		if connect.IsWireError(err) && connect.CodeOf(err) == connect.CodeUnauthenticated {
			return nil, fmt.Errorf("%w (%s): %v", ErrTokenRefused, u, err)
		}
		r.rotate()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sim: register with %s: %w", u, ctx.Err())
		}
		d := wait/2 + rand.N(wait/2+1)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, fmt.Errorf("sim: register with %s: %w", u, ctx.Err())
		}
		wait = min(2*wait, 2*time.Second)
	}
}
