package events_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/events"
	"github.com/norsk-go/norsk-manager/pkg/eventsubject"
)

// Every subscriber gets the same entry for an event, and from it the one
// encoding, made once however many ask at once: the event's protobuf
// encoding. Its kind and subject are eventsubject's.
func TestEntryIsSharedAndEncodedOnce(t *testing.T) {
	t.Parallel()
	b := events.New(16)
	subs := []*events.Subscription{b.SubscribeTail(), b.SubscribeTail(), b.SubscribeTail()}
	e := &managerv1.Event{Index: 7, Kind: &managerv1.Event_JobUpdated{JobUpdated: &managerv1.JobEvent{
		Job: &managerv1.JobWithHistory{
			Job:       &managerv1.Job{JobId: "news.0", Tags: map[string]string{"bundleId": "news", "team": "a"}},
			Instances: []*managerv1.Instance{{JobId: "news.0", Role: "primary", NodeId: "n1"}},
		},
	}}}
	b.Publish(e)
	var got []*events.Entry
	for _, s := range subs {
		es, err := s.NextEntries(context.Background())
		if err != nil || len(es) != 1 {
			t.Fatalf("NextEntries = %d entries, %v", len(es), err)
		}
		got = append(got, es[0])
	}
	if got[0] != got[1] || got[1] != got[2] || got[0].Event() != e {
		t.Fatal("the subscribers got different entries, or a copy of the event")
	}
	wires := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range wires {
		wg.Go(func() {
			w, err := got[i%len(got)].Wire()
			if err != nil {
				t.Error(err)
			}
			wires[i] = w
		})
	}
	wg.Wait()
	for _, w := range wires[1:] {
		if &w[0] != &wires[0][0] {
			t.Fatal("Wire encoded the event more than once")
		}
	}
	var back managerv1.Event
	if err := proto.Unmarshal(wires[0], &back); err != nil || !proto.Equal(&back, e) {
		t.Fatalf("Wire does not decode to the event (%v)", err)
	}
	if k := got[0].Kind(); k != eventsubject.Kind(e) {
		t.Errorf("Kind = %q, want %q", k, eventsubject.Kind(e))
	}
	want := eventsubject.Of(e)
	if s := got[0].Subject(); s.JobID != want.JobID || s.BundleID != want.BundleID || !slices.Equal(s.NodeIDs, want.NodeIDs) {
		t.Errorf("Subject = %+v, want %+v", s, want)
	}
	// Next (the AutoManager's) still gives the events themselves.
	s := b.SubscribeTail()
	b.Publish(ev(8, "x"))
	evs, err := s.Next(context.Background())
	if err != nil || len(evs) != 1 || evs[0].GetJobDeleted().GetJobId() != "x" {
		t.Fatalf("Next = %v, %v", evs, err)
	}
}
