package testcluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/examples/sample-media/frames"
)

// FrameSink receives a sample-media frame stream over UDP on loopback, as
// a downstream of a live channel would, and keeps every frame with its
// arrival time and sender (the payload's node), so a test can see what a
// migration did to the output.
//
// The arrival time is the kernel's (SO_TIMESTAMPNS, on Linux): when the
// datagram reached the sink's socket, not when the sink's goroutine got to
// read it, which in a test process that also runs the Manager and the
// workers can be many milliseconds later. Elsewhere it is the read time.
type FrameSink struct {
	conn    *net.UDPConn
	stamped bool // arrivals carry the kernel's stamp
	Checker frames.Checker

	mu     sync.Mutex
	frames []Arrival
	wake   chan struct{}
	done   chan struct{}
}

// Arrival is one frame as the sink received it.
type Arrival struct {
	Seq     uint64
	At      time.Time
	Sent    time.Time
	Node    string // the sender's NORSK_NODE_ID (from the payload)
	Payload string
}

// NewFrameSink listens on 127.0.0.1:0 until the test ends.
func NewFrameSink(t testing.TB) *FrameSink {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("frame sink: %v", err)
	}
	s := &FrameSink{conn: conn, stamped: enableRxStamps(conn), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.receive()
	t.Cleanup(func() { _ = conn.Close(); <-s.done })
	return s
}

// URL is the sink the sample job's SINK names.
func (s *FrameSink) URL() string { return "udp://" + s.conn.LocalAddr().String() }

func (s *FrameSink) receive() {
	defer close(s.done)
	buf := make([]byte, 65536)
	oob := make([]byte, 128)
	for {
		n, oobn, _, _, err := s.conn.ReadMsgUDP(buf, oob)
		if err != nil {
			return
		}
		at := time.Now()
		if s.stamped {
			if k, ok := rxStamp(oob[:oobn]); ok {
				at = k
			}
		}
		f, err := frames.Decode(buf[:n])
		if err != nil {
			continue
		}
		s.Checker.Add(f, at)
		node := ""
		for _, kv := range strings.Fields(string(f.Payload)) {
			if v, ok := strings.CutPrefix(kv, "node="); ok {
				node = v
			}
		}
		s.mu.Lock()
		s.frames = append(s.frames, Arrival{Seq: f.Seq, At: at, Sent: time.Unix(0, f.SentUnixNano), Node: node, Payload: string(f.Payload)})
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Frames returns the frames received so far, in arrival order.
func (s *FrameSink) Frames() []Arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Arrival(nil), s.frames...)
}

// WaitFrom waits until n frames from node have arrived (node "" = any).
func (s *FrameSink) WaitFrom(ctx context.Context, node string, n int) error {
	for {
		got := 0
		for _, f := range s.Frames() {
			if node == "" || f.Node == node {
				got++
			}
		}
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d frames from %q: %w", got, n, node, ctx.Err())
		case <-s.wake:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Cutover is what a move from one sender to another did to the stream.
type Cutover struct {
	// LastFromSource and FirstFromTarget are the frames either side of the
	// cut (by arrival).
	LastFromSource, FirstFromTarget Arrival
	// Gap is FirstFromTarget.At - LastFromSource.At: positive is a time
	// without output, negative a time both sent.
	Gap time.Duration
	// Overlap counts the frames that arrived from the source after the
	// target's first (both on air).
	Overlap int
	// Missing and Duplicates are over the whole stream (frames.Checker).
	Missing, Duplicates uint64
	// Report is the checker's report.
	Report frames.Report
}

// CutoverFrom measures the move from sender node from to node to.
func (s *FrameSink) CutoverFrom(from, to string) (Cutover, error) {
	var c Cutover
	fs := s.Frames()
	var haveSrc, haveTgt bool
	for _, f := range fs {
		switch f.Node {
		case from:
			if !haveTgt {
				c.LastFromSource, haveSrc = f, true
			} else {
				c.Overlap++
			}
		case to:
			if !haveTgt {
				c.FirstFromTarget, haveTgt = f, true
			}
		}
	}
	if !haveSrc || !haveTgt {
		return c, fmt.Errorf("frames from %s: %v, from %s: %v (of %d)", from, haveSrc, to, haveTgt, len(fs))
	}
	// The last source frame is the last one sent before the target's first
	// arrived, unless the source went on (overlap).
	for _, f := range fs {
		if f.Node == from && !f.At.After(c.FirstFromTarget.At) {
			c.LastFromSource = f
		}
	}
	c.Gap = c.FirstFromTarget.At.Sub(c.LastFromSource.At)
	c.Report = s.Checker.Report()
	c.Missing, c.Duplicates = c.Report.MissingCount, c.Report.Duplicates
	return c, nil
}
