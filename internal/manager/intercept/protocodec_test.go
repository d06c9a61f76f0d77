package intercept

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// shared is an Encoded message, as the event broker's entries are.
type shared struct {
	m    proto.Message
	wire []byte
}

func (s shared) Message() proto.Message { return s.m }
func (s shared) Wire() ([]byte, error)  { return s.wire, nil }

// An Encoded message goes out as its shared encoding, copied: connect
// recycles the buffer it is given, and whatever it then writes there
// must not reach the shared bytes. Any other message is encoded as
// connect's own codec does, and JSON encodes the Encoded's message.
func TestCodecsSendTheSharedEncoding(t *testing.T) {
	t.Parallel()
	ev := &managerv1.Event{Index: 3, Kind: &managerv1.Event_JobDeleted{JobDeleted: &managerv1.JobDeleted{JobId: "a"}}}
	wire, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	keep := bytes.Clone(wire)
	enc := shared{ev, wire}
	c := protoBinary{}
	cases := []struct {
		name string
		out  func() ([]byte, error)
	}{
		{"MarshalAppend to a small buffer", func() ([]byte, error) { return c.MarshalAppend(make([]byte, 0, 1), enc) }},
		{"MarshalAppend to a large buffer", func() ([]byte, error) { return c.MarshalAppend(make([]byte, 0, 512), enc) }},
		{"MarshalAppend after bytes", func() ([]byte, error) {
			b, err := c.MarshalAppend([]byte("xy"), enc)
			return b[2:], err
		}},
		{"Marshal", func() ([]byte, error) { return c.Marshal(enc) }},
		{"Marshal of the message", func() ([]byte, error) { return c.Marshal(ev) }},
		{"MarshalAppend of the message", func() ([]byte, error) { return c.MarshalAppend(nil, ev) }},
		{"MarshalStable", func() ([]byte, error) { return c.MarshalStable(enc) }},
	}
	for _, tc := range cases {
		out, err := tc.out()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Equal(out, keep) {
			t.Errorf("%s = %x, want %x", tc.name, out, keep)
		}
		for i := range out {
			out[i] = 0xff // connect reusing its buffer
		}
		if !bytes.Equal(wire, keep) {
			t.Fatalf("%s: writing to its result changed the shared encoding", tc.name)
		}
	}
	var back managerv1.Event
	if err := c.Unmarshal(keep, &back); err != nil || !proto.Equal(&back, ev) {
		t.Fatalf("Unmarshal = %v, %v", &back, err)
	}
	js, err := strictJSON{"json"}.Marshal(enc)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := protojson.Marshal(ev)
	if !bytes.Equal(js, want) {
		t.Errorf("JSON of an Encoded = %s, want %s", js, want)
	}
}
