package manager

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// A TTL too long to represent is refused, never wrapped into an expiry
// in the past.
func TestLongTokenTTLDoesNotExpireAtOnce(t *testing.T) {
	t.Parallel()
	_, admin := startServer(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const ttl = 10_000_000_000 // ~317 years
	tr, err := admin.CreateToken(ctx, connect.NewRequest(&managerv1.CreateTokenRequest{Name: "long", Role: state.RoleReadOnly, TtlS: ttl}))
	if err != nil {
		return // refusing it is fine too
	}
	exp := tr.Msg.GetToken().GetExpiresAt().AsTime()
	if !exp.After(time.Now().Add(100 * 365 * 24 * time.Hour)) {
		t.Fatalf("a token asked to live %d s expires at %s", int64(ttl), exp.UTC())
	}
}
