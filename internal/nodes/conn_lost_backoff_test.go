package nodes

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// failLostStore is a memStore that refuses NodeLost, counting the attempts.
type failLostStore struct {
	*memStore
	lostAttempts atomic.Int32
}

func (s *failLostStore) Apply(ctx context.Context, cmd *storev1.Command) (state.Result, error) {
	if _, ok := cmd.GetCmd().(*storev1.Command_NodeLost); ok {
		s.lostAttempts.Add(1)
		return state.Result{}, errors.New("store unavailable")
	}
	return s.memStore.Apply(ctx, cmd)
}

// TestNodeLostRetryBacksOff: when recording a node lost fails, the
// connection retries with its backoff (starting at 250 ms, doubling) rather
// than at once, even though its worker refuses every dial immediately.
func TestNodeLostRetryBacksOff(t *testing.T) {
	t.Parallel()
	// An address that refuses connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()

	st := &failLostStore{memStore: newMemStore()}
	setupNode(t, st.memStore, addr)
	runController(t, Config{Store: st, HeartbeatInterval: time.Hour, LostGrace: 50 * time.Millisecond, TakeoverGrace: 50 * time.Millisecond})
	eventually(t, 5*time.Second, "a first attempt to record the node lost", func() bool { return st.lostAttempts.Load() > 0 })
	time.Sleep(1500 * time.Millisecond)
	// 250 ms doubling up to 10 s: about 4 attempts in 1.5 s.
	if n := st.lostAttempts.Load(); n > 10 {
		t.Fatalf("%d attempts to record the node lost in about 1.5s: no backoff", n)
	}
}
