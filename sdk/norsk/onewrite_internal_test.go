package norsk

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// writeCounter counts the writes that reach it.
type writeCounter struct {
	writes int
	buf    bytes.Buffer
}

func (w *writeCounter) Write(p []byte) (int, error) { w.writes++; return w.buf.Write(p) }

// opaqueBody is a body of a type net/http does not know (as connect's).
type opaqueBody struct{ io.Reader }

func (opaqueBody) Close() error { return nil }

// writesOnce is a RoundTripper that writes the request as net/http's
// HTTP/1.1 transport does (through a bufio.Writer) and counts the writes.
type writesOnce struct {
	out  writeCounter
	body []byte
}

func (w *writesOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	bw := bufio.NewWriter(&w.out)
	if err := r.Write(bw); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	again, err := r.GetBody()
	if err != nil {
		return nil, err
	}
	w.body, _ = io.ReadAll(again)
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

// A request whose body net/http does not know goes out in one write
// through oneWrite (two without it: headers, then body), with the same
// bytes, and can be sent again (GetBody).
func TestOneWrite(t *testing.T) {
	t.Parallel()
	const payload = "a protobuf message"
	req := func() *http.Request {
		r, err := http.NewRequest(http.MethodPost, "http://manager/norsk.manager.v1.Manager/CreateJob", opaqueBody{strings.NewReader(payload)})
		if err != nil {
			t.Fatal(err)
		}
		r.ContentLength = int64(len(payload))
		r.GetBody = func() (io.ReadCloser, error) { return opaqueBody{strings.NewReader(payload)}, nil }
		return r
	}
	var plain writesOnce
	if _, err := plain.RoundTrip(req()); err != nil {
		t.Fatal(err)
	}
	if plain.out.writes != 2 {
		t.Fatalf("without oneWrite: %d writes, want 2 (does net/http no longer flush the headers first?)", plain.out.writes)
	}
	var once writesOnce
	if _, err := (oneWrite{&once}).RoundTrip(req()); err != nil {
		t.Fatal(err)
	}
	if once.out.writes != 1 {
		t.Errorf("through oneWrite: %d writes, want 1", once.out.writes)
	}
	if !bytes.Equal(once.out.buf.Bytes(), plain.out.buf.Bytes()) {
		t.Errorf("through oneWrite the request reads\n%q\nwant\n%q", once.out.buf.Bytes(), plain.out.buf.Bytes())
	}
	if string(once.body) != payload {
		t.Errorf("GetBody = %q, want %q", once.body, payload)
	}
}
