package eventwrite

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A batch holds the flushes connect asks for after each message and
// flushes once at its end; outside a batch a flush goes through.
func TestBatchHoldsFlushesUntilItsEnd(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	var out *Out
	var flusher http.Flusher
	Batching(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, flusher = New(r.Context(), time.Minute), w.(http.Flusher)
	})).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))

	steps := []struct {
		name string
		do   func() error
		want bool // flushed by now
	}{
		{"a batch starts", func() error { out.StartBatch(); return nil }, false},
		{"connect flushes a message", func() error { flusher.Flush(); return nil }, false},
		{"and another", func() error { flusher.Flush(); return nil }, false},
		{"the batch ends", out.EndBatch, true},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if rec.Flushed != s.want {
			t.Fatalf("%s: flushed %v, want %v", s.name, rec.Flushed, s.want)
		}
	}
	rec.Flushed = false
	out.StartBatch()
	out.Done() // the handler returns mid-batch: connect's last flush goes through
	flusher.Flush()
	if !rec.Flushed {
		t.Fatal("a flush after Done was held")
	}
	// Without Batching (or the gate's controller) nothing is held and no
	// deadline is set.
	bare := New(context.Background(), time.Minute)
	bare.StartBatch()
	bare.BeforeWrite()
	if err := bare.EndBatch(); err != nil {
		t.Fatal(err)
	}
}
