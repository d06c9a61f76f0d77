package testcluster

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/examples/sample-media/frames"
)

// The sink keeps each frame with its sender and an arrival time taken
// between the send and the read (on Linux, the kernel's stamp).
func TestFrameSinkStampsArrivals(t *testing.T) {
	t.Parallel()
	s := NewFrameSink(t)
	if runtime.GOOS == "linux" && !s.stamped {
		t.Error("the sink does not read the kernel's arrival stamps on Linux")
	}
	conn, err := net.Dial("udp", s.conn.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var sent []time.Time
	for seq := range uint64(3) {
		rec, err := frames.Encode(frames.Frame{Seq: seq, SentUnixNano: time.Now().UnixNano(), StreamID: "s", Payload: []byte("node=n1 role=primary")})
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, time.Now())
		if _, err := conn.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitFrom(ctx, "n1", 3); err != nil {
		t.Fatal(err)
	}
	read := time.Now()
	for i, f := range s.Frames() {
		if f.Seq != uint64(i) || f.Node != "n1" {
			t.Errorf("frame %d: %+v", i, f)
		}
		if f.At.Before(sent[i].Round(0)) || f.At.After(read.Round(0)) {
			t.Errorf("frame %d arrived at %s: not between its send (%s) and its read (%s)", i, f.At, sent[i], read)
		}
	}
	if r := s.Checker.Report(); !r.Continuous() || r.Count != 3 {
		t.Errorf("checker: %s", r)
	}
}
