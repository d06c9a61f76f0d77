package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/internal/nodes"
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

// Events published once reach every subscriber whole and in order, however
// they ask: binary protobuf over gRPC (the shared encoding), Connect's JSON
// (each encoded for it), and filtered. Published faster than one at a
// time, they go out in batches, each flushed at its end.
func TestEventStreamDeliversSharedEventsToEverySubscriber(t *testing.T) {
	t.Parallel()
	s, c := startServerWith(t, func(*Config) {})
	jsonClient := managerv1connect.NewManagerClient(nodes.H2CClient(), s.URL(), connect.WithProtoJSON(), auth.WithBearer(s.BootstrapToken()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on a hung stream, not a timing check
	defer cancel()
	live := func(c managerv1connect.ManagerClient, req *managerv1.EventStreamRequest) *connect.ServerStreamForClient[managerv1.Event] {
		req.SkipSnapshot = true
		st, err := c.EventStream(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		if !st.Receive() || st.Msg().GetInitialDataComplete() == nil {
			t.Fatalf("the stream did not start with initial_data_complete: %v", st.Err())
		}
		return st
	}
	subs := []struct {
		name string
		st   *connect.ServerStreamForClient[managerv1.Event]
		want func(i int) bool
	}{
		{"grpc", live(c, &managerv1.EventStreamRequest{}), func(int) bool { return true }},
		{"grpc again", live(c, &managerv1.EventStreamRequest{}), func(int) bool { return true }},
		{"connect json", live(jsonClient, &managerv1.EventStreamRequest{}), func(int) bool { return true }},
		{"filtered", live(c, &managerv1.EventStreamRequest{JobIds: []string{"job-7"}}), func(i int) bool { return i%10 == 7 }},
	}
	const n = 3000
	base := s.st().State().Snapshot().Index() + 1000
	published := make([]*managerv1.Event, n)
	for i := range published {
		published[i] = &managerv1.Event{Index: base + uint64(i/5), Kind: &managerv1.Event_JobUpdated{JobUpdated: &managerv1.JobEvent{
			Job: &managerv1.JobWithHistory{Job: &managerv1.Job{JobId: fmt.Sprintf("job-%d", i%10), Description: fmt.Sprintf("event %d", i),
				Tags: map[string]string{"a": "1", "b": "2"}}},
		}}}
	}
	for i := 0; i < n; i += 5 {
		s.st().Broker().Publish(published[i : i+5]...)
	}
	for _, sub := range subs {
		for i, e := range published {
			if !sub.want(i) {
				continue
			}
			if !sub.st.Receive() {
				t.Fatalf("%s: the stream ended before event %d: %v", sub.name, i, sub.st.Err())
			}
			if !proto.Equal(sub.st.Msg(), e) {
				t.Fatalf("%s: event %d is %v, want %v", sub.name, i, sub.st.Msg(), e)
			}
		}
	}
}
