package norsk

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// maxOneWriteBody is the largest request body oneWrite copies.
const maxOneWriteBody = 64 << 10

// oneWrite is the unary transport's round tripper: it hands net/http a
// request body it knows to be in memory, so that an HTTP/1.1 request goes
// out in one write. connect's unary body is a type of its own, and for a
// body it does not know net/http flushes the headers first ("the server
// may need them early"): two writes and two segments per call, and two
// reads on the Manager. Bodies over maxOneWriteBody go as they are.
type oneWrite struct{ next http.RoundTripper }

// RoundTrip sends a copy of r whose body is a bytes.Reader of r's body; r
// itself is left as it was, but for its body, read and closed.
func (t oneWrite) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength <= 0 || r.ContentLength > maxOneWriteBody {
		return t.next.RoundTrip(r)
	}
	b := make([]byte, r.ContentLength)
	_, err := io.ReadFull(r.Body, b)
	if cerr := r.Body.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	c := *r
	c.Body = io.NopCloser(bytes.NewReader(b))
	c.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return t.next.RoundTrip(&c)
}
