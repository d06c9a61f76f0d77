package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/norsk-go/norsk-manager/examples/exampletest"
	"github.com/norsk-go/norsk-manager/examples/sample-media/frames"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func encode(t *testing.T, f frames.Frame) []byte {
	t.Helper()
	b, err := frames.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestServeUDP(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rcv := newReceiver()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rcv.serveUDP(ctx, conn) }()

	out, err := net.Dial("udp", conn.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	for _, seq := range []uint64{0, 1, 2, 4} {
		if _, err := out.Write(encode(t, frames.Frame{Seq: seq, StreamID: "s", Payload: []byte("node=a role=primary pid=1")})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := out.Write([]byte("not a frame")); err != nil {
		t.Fatal(err)
	}
	exampletest.Eventually(t, 10*time.Second, "4 frames and 1 bad datagram received", func() bool {
		rcv.mu.Lock()
		bad := rcv.bad
		rcv.mu.Unlock()
		return rcv.chk.Report().Count == 4 && bad == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serveUDP: %v", err)
	}
	s := rcv.summary()
	for _, want := range []string{"frames=4", "seq=0-4", "missing=1 [3]", "bad_records=1", `senders={"node=a role=primary pid=1":4}`} {
		if !strings.Contains(s, want) {
			t.Errorf("summary %q lacks %q", s, want)
		}
	}
}

func TestReadStream(t *testing.T) {
	var buf bytes.Buffer
	for seq := uint64(10); seq < 20; seq++ {
		buf.Write(encode(t, frames.Frame{Seq: seq, StreamID: "s"}))
	}
	rcv := newReceiver()
	if err := rcv.readStream(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if r := rcv.chk.Report(); !r.Continuous() || r.First != 10 || r.Last != 19 {
		t.Fatalf("report %v", r)
	}

	// A truncated file ends the reading with ErrShort.
	rcv = newReceiver()
	err := rcv.readStream(bytes.NewReader(buf.Bytes()[:buf.Len()-3]))
	if !errors.Is(err, frames.ErrShort) {
		t.Fatalf("err = %v, want ErrShort", err)
	}
	if r := rcv.chk.Report(); r.Count != 9 {
		t.Fatalf("count %d, want 9", r.Count)
	}
}
