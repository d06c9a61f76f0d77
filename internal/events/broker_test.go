package events_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/events"
)

// ev makes an event at index with a name to tell it apart.
func ev(index uint64, name string) *managerv1.Event {
	return &managerv1.Event{Index: index, Kind: &managerv1.Event_JobDeleted{JobDeleted: &managerv1.JobDeleted{JobId: name}}}
}

// evs makes events from "index:name" specs.
func evs(specs ...string) []*managerv1.Event {
	out := make([]*managerv1.Event, len(specs))
	for i, s := range specs {
		var idx uint64
		var name string
		if _, err := fmt.Sscanf(strings.Replace(s, ":", " ", 1), "%d %s", &idx, &name); err != nil {
			panic(s)
		}
		out[i] = ev(idx, name)
	}
	return out
}

func describe(es []*managerv1.Event) string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = fmt.Sprintf("%d:%s", e.GetIndex(), e.GetJobDeleted().GetJobId())
	}
	return strings.Join(s, " ")
}

// drain returns what is available now, without blocking.
func drain(t *testing.T, s *events.Subscription) (string, error) {
	t.Helper()
	var all []*managerv1.Event
	for {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		got, err := s.Next(ctx)
		if errors.Is(err, context.Canceled) {
			return describe(all), nil
		}
		if err != nil {
			return describe(all), err
		}
		all = append(all, got...)
	}
}

func TestOrderingAndResume(t *testing.T) {
	published := evs("1:a", "1:b", "2:c", "3:d", "3:e", "3:f", "5:g", "5:h", "6:i")
	tests := []struct {
		after uint64
		want  string
	}{
		{0, "1:a 1:b 2:c 3:d 3:e 3:f 5:g 5:h 6:i"},
		{1, "2:c 3:d 3:e 3:f 5:g 5:h 6:i"},
		{2, "3:d 3:e 3:f 5:g 5:h 6:i"},
		{3, "5:g 5:h 6:i"},
		{4, "5:g 5:h 6:i"},
		{5, "6:i"},
		{6, ""},
		{99, ""},
	}
	b := events.New(16)
	b.Publish(published[:4]...)
	b.Publish(published[4:]...)
	for _, tt := range tests {
		s, err := b.SubscribeAfter(tt.after)
		if err != nil {
			t.Fatalf("SubscribeAfter(%d): %v", tt.after, err)
		}
		got, err := drain(t, s)
		if err != nil || got != tt.want {
			t.Errorf("after %d: %q, %v; want %q", tt.after, got, err, tt.want)
		}
	}
	// A subscription keeps going with what is published later.
	s, _ := b.SubscribeAfter(6)
	b.Publish(evs("7:j", "7:k")...)
	if got, _ := drain(t, s); got != "7:j 7:k" {
		t.Errorf("later events = %q", got)
	}
	// One subscribed far ahead gets only what is after its index.
	s, _ = b.SubscribeAfter(8)
	b.Publish(evs("8:l", "9:m")...)
	if got, _ := drain(t, s); got != "9:m" {
		t.Errorf("subscribed after 8: %q", got)
	}
}

func TestResyncWhenEvicted(t *testing.T) {
	b := events.New(4)
	b.Publish(evs("1:a", "1:b", "1:c")...)
	b.Publish(evs("2:d", "2:e")...) // evicts 1:a
	tests := []struct {
		after uint64
		want  string
		err   error
	}{
		{0, "", events.ErrResync}, // 1:a is gone
		{1, "2:d 2:e", nil},
		{2, "", nil},
	}
	check := func() {
		t.Helper()
		for _, tt := range tests {
			s, err := b.SubscribeAfter(tt.after)
			if !errors.Is(err, tt.err) {
				t.Fatalf("SubscribeAfter(%d) = %v, want %v", tt.after, err, tt.err)
			}
			if err != nil {
				continue
			}
			if got, err := drain(t, s); got != tt.want || err != nil {
				t.Errorf("after %d: %q %v, want %q", tt.after, got, err, tt.want)
			}
		}
	}
	check()
	// Evicting one of index 2's events makes 1 unusable too.
	b.Publish(evs("3:f", "3:g", "3:h")...) // ring: 2:e 3:f 3:g 3:h
	tests = []struct {
		after uint64
		want  string
		err   error
	}{
		{1, "", events.ErrResync},
		{2, "3:f 3:g 3:h", nil},
	}
	check()
}

func TestSlowConsumer(t *testing.T) {
	b := events.New(4)
	s, err := b.SubscribeAfter(0)
	if err != nil {
		t.Fatal(err)
	}
	slow := b.SubscribeTail()
	b.Publish(evs("1:a", "2:b")...)
	// The first reader keeps up.
	if got, _ := drain(t, s); got != "1:a 2:b" {
		t.Fatalf("got %q", got)
	}
	b.Publish(evs("3:c", "4:d", "5:e")...) // slow is now 5 behind a ring of 4
	if _, err := drain(t, slow); !errors.Is(err, events.ErrSlowConsumer) {
		t.Fatalf("lagging cursor: %v, want ErrSlowConsumer", err)
	}
	if got, err := drain(t, s); got != "3:c 4:d 5:e" || err != nil {
		t.Errorf("the keeping-up reader got %q %v", got, err)
	}
	// It resubscribes from the last index it saw (0) and must resync.
	if _, err := b.SubscribeAfter(0); !errors.Is(err, events.ErrResync) {
		t.Errorf("resubscribe: %v, want ErrResync", err)
	}
}

func TestSkip(t *testing.T) {
	b := events.New(16)
	tail := b.SubscribeTail()
	b.Publish(evs("4:a", "5:b", "5:c", "6:d")...)
	tail.Skip(5) // a snapshot at index 5 was taken
	if got, _ := drain(t, tail); got != "6:d" {
		t.Errorf("after Skip(5): %q", got)
	}
	// Skip applies to later events too, and can move the other way.
	b.Publish(evs("7:e", "8:f")...)
	tail.Skip(7)
	if got, _ := drain(t, tail); got != "8:f" {
		t.Errorf("after Skip(7): %q", got)
	}
	s, _ := b.SubscribeAfter(3)
	s.Skip(6)
	if got, _ := drain(t, s); got != "7:e 8:f" {
		t.Errorf("SubscribeAfter(3) then Skip(6): %q", got)
	}
	// A tail subscription sees nothing published before it.
	late := b.SubscribeTail()
	b.Publish(evs("9:g")...)
	if got, _ := drain(t, late); got != "9:g" {
		t.Errorf("late tail: %q", got)
	}
}

func TestReset(t *testing.T) {
	b := events.New(8)
	behind := b.SubscribeTail()
	b.Publish(evs("1:a", "2:b", "3:c")...)
	b.Reset(10) // a snapshot at index 10 was restored
	tests := []struct {
		after uint64
		err   error
	}{
		{0, events.ErrResync},
		{3, events.ErrResync},
		{9, events.ErrResync},
		{10, nil},
		{11, nil},
	}
	for _, tt := range tests {
		if _, err := b.SubscribeAfter(tt.after); !errors.Is(err, tt.err) {
			t.Errorf("SubscribeAfter(%d) after Reset(10) = %v, want %v", tt.after, err, tt.err)
		}
	}
	s, _ := b.SubscribeAfter(10)
	b.Publish(evs("11:d")...)
	if got, _ := drain(t, s); got != "11:d" {
		t.Errorf("after reset: %q", got)
	}
	// A subscriber that had not read everything before the reset is cut off.
	if _, err := drain(t, behind); !errors.Is(err, events.ErrSlowConsumer) && !errors.Is(err, events.ErrResync) {
		t.Errorf("reader with unread events across a reset: %v, want cut off", err)
	}
}

// TestResetCutsOffCaughtUpSubscribers: after a restore, a subscription that
// had read everything has still missed what the restored snapshot contains.
func TestResetCutsOffCaughtUpSubscribers(t *testing.T) {
	b := events.New(8)
	s := b.SubscribeTail()
	b.Publish(evs("1:a")...)
	if got, _ := drain(t, s); got != "1:a" {
		t.Fatalf("got %q", got)
	}
	b.Reset(10)
	b.Publish(evs("11:b")...)
	got, err := drain(t, s)
	if err == nil {
		t.Errorf("after Reset(10) the subscription that saw index 1 got %q with no error; events 2..10 are lost", got)
	}
}

// TestNextKeepsAnIndexTogether: a subscriber resumes after the last index
// it saw, so a batch that ends inside an index loses the rest of it on a
// resubscription.
func TestNextKeepsAnIndexTogether(t *testing.T) {
	b := events.New(4096)
	s, _ := b.SubscribeAfter(0)
	var batch []*managerv1.Event
	for i := range 1000 {
		batch = append(batch, ev(1, fmt.Sprint("a", i)))
	}
	for i := range 100 {
		batch = append(batch, ev(2, fmt.Sprint("b", i)))
	}
	b.Publish(batch...)
	got, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	last := got[len(got)-1].GetIndex()
	// Resume as a reconnecting client would.
	r, err := b.SubscribeAfter(last)
	if err != nil {
		t.Fatal(err)
	}
	rest, _ := drain(t, r)
	n := len(got)
	if rest != "" {
		n += len(strings.Split(rest, " "))
	}
	if n != len(batch) {
		t.Errorf("first batch ended at index %d after %d events; resuming after it delivered %d events in all, want %d", last, len(got), n, len(batch))
	}
}

func TestBlockedNextWakes(t *testing.T) {
	tests := []struct {
		name    string
		wake    func(b *events.Broker, cancel context.CancelFunc)
		wantErr error
		want    string
	}{
		{"publish", func(b *events.Broker, _ context.CancelFunc) { b.Publish(evs("1:a", "1:b")...) }, nil, "1:a 1:b"},
		{"close", func(b *events.Broker, _ context.CancelFunc) { b.Close() }, events.ErrClosed, ""},
		{"cancel", func(_ *events.Broker, cancel context.CancelFunc) { cancel() }, context.Canceled, ""},
		{"publish of skipped events does not wake", func(b *events.Broker, cancel context.CancelFunc) {
			b.Publish(evs("0:skipped")...)
			synctest.Wait()
			cancel()
		}, context.Canceled, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := events.New(8)
				s, _ := b.SubscribeAfter(0)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				type result struct {
					es  []*managerv1.Event
					err error
				}
				done := make(chan result, 1)
				go func() {
					es, err := s.Next(ctx)
					done <- result{es, err}
				}()
				synctest.Wait() // Next is blocked
				select {
				case r := <-done:
					t.Fatalf("Next returned before anything happened: %v %v", describe(r.es), r.err)
				default:
				}
				tt.wake(b, cancel)
				r := <-done
				if !errors.Is(r.err, tt.wantErr) || describe(r.es) != tt.want {
					t.Errorf("Next = %q, %v; want %q, %v", describe(r.es), r.err, tt.want, tt.wantErr)
				}
			})
		})
	}
}

func TestClose(t *testing.T) {
	b := events.New(8)
	s, _ := b.SubscribeAfter(0)
	b.Publish(evs("1:a")...)
	b.Close()
	b.Close() // twice is fine
	if _, err := s.Next(context.Background()); !errors.Is(err, events.ErrClosed) {
		t.Errorf("Next after Close = %v", err)
	}
	if _, err := b.SubscribeAfter(0); !errors.Is(err, events.ErrClosed) {
		t.Errorf("SubscribeAfter after Close = %v", err)
	}
	if _, err := b.SubscribeTail().Next(context.Background()); !errors.Is(err, events.ErrClosed) {
		t.Errorf("a tail subscription after Close: %v", err)
	}
	b.Publish(evs("2:b")...) // ignored, no panic
}

func TestDefaultCapacity(t *testing.T) {
	b := events.New(0)
	for i := range events.DefaultCapacity {
		b.Publish(ev(uint64(i+1), "x"))
	}
	if _, err := b.SubscribeAfter(0); err != nil {
		t.Errorf("a full default ring evicted: %v", err)
	}
	b.Publish(ev(events.DefaultCapacity+1, "x"))
	if _, err := b.SubscribeAfter(0); !errors.Is(err, events.ErrResync) {
		t.Errorf("past the default capacity: %v, want ErrResync", err)
	}
}

// TestConcurrentFanout: one publisher, many subscribers, each receives
// every event in order (run with -race).
func TestConcurrentFanout(t *testing.T) {
	const (
		subscribers = 16
		indexes     = 2000
	)
	var published []*managerv1.Event
	for i := 1; i <= indexes; i++ {
		for k := range 1 + i%3 {
			published = append(published, ev(uint64(i), fmt.Sprint(i, ".", k)))
		}
	}
	b := events.New(len(published))
	var wg sync.WaitGroup
	errs := make(chan error, subscribers)
	start := make(chan struct{})
	for n := range subscribers {
		// Half subscribe from the start, half at the tail before
		// publishing begins: both must see everything.
		var s *events.Subscription
		if n%2 == 0 {
			var err error
			if s, err = b.SubscribeAfter(0); err != nil {
				t.Fatal(err)
			}
		} else {
			s = b.SubscribeTail()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			i := 0
			for i < len(published) {
				got, err := s.Next(context.Background())
				if err != nil {
					errs <- fmt.Errorf("subscriber %d after %d events: %w", n, i, err)
					return
				}
				for _, e := range got {
					if e != published[i] {
						errs <- fmt.Errorf("subscriber %d: event %d is %v, want %v", n, i, e, published[i])
						return
					}
					i++
				}
			}
		}()
	}
	close(start)
	for i := 0; i < len(published); {
		// Publish in uneven batches, one index or several at a time.
		j := i + 1 + i%5
		for j < len(published) && published[j].GetIndex() == published[j-1].GetIndex() {
			j++
		}
		j = min(j, len(published))
		b.Publish(published[i:j]...)
		i = j
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// BenchmarkFanout100 measures delivery from one publisher to 100
// subscribers; it reports events delivered per second (to all subscribers).
func BenchmarkFanout100(b *testing.B) {
	const subscribers = 100
	published := make([]*managerv1.Event, b.N)
	for i := range published {
		published[i] = ev(uint64(i/2+1), "x")
	}
	br := events.New(max(b.N, 1024))
	var wg sync.WaitGroup
	for range subscribers {
		s, err := br.SubscribeAfter(0)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < b.N; {
				got, err := s.Next(context.Background())
				if err != nil {
					b.Error(err)
					return
				}
				n += len(got)
			}
		}()
	}
	b.ResetTimer()
	for i := range published {
		br.Publish(published[i])
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(subscribers)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
