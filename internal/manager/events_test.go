package manager

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
)

// An event stream stays open through a quiet period longer than the write
// timeout: over HTTP/2 a write deadline left set would reset the idle
// stream, so EventStream sets it for each write only.
func TestEventStreamSurvivesQuietPeriod(t *testing.T) {
	t.Parallel()
	const writeTimeout = 500 * time.Millisecond
	_, c := startServerWith(t, func(cfg *Config) { cfg.EventWriteTimeout = writeTimeout })
	quiet := 4 * writeTimeout
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := openEvents(t, ctx, c)
	time.AfterFunc(quiet, cancel)
	// Nothing happens on the Manager: the next Receive should only end when
	// our own context does.
	if st.Receive() {
		t.Fatalf("unexpected event %v", st.Msg())
	}
	if ctx.Err() == nil || connect.CodeOf(st.Err()) != connect.CodeCanceled {
		t.Fatalf("an idle event stream was cut before the subscriber left (write timeout %s): %v", writeTimeout, st.Err())
	}
}

// openEvents opens an event stream and reads its snapshot up to
// initialDataComplete; the stream closes when the test ends.
func openEvents(t *testing.T, ctx context.Context, c managerv1connect.ManagerClient) *connect.ServerStreamForClient[managerv1.Event] {
	t.Helper()
	st, err := c.EventStream(ctx, connect.NewRequest(&managerv1.EventStreamRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for st.Receive() {
		if st.Msg().GetInitialDataComplete() != nil {
			return st
		}
	}
	t.Fatalf("the event stream ended before its snapshot: %v", st.Err())
	return nil
}
