package frames

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

func sampleFrames() []Frame {
	return []Frame{
		{},
		{Seq: 1, SentUnixNano: 1_700_000_000_123_456_789, StreamID: "hello", Payload: []byte("payload")},
		{Seq: math.MaxUint64, SentUnixNano: -1, StreamID: strings.Repeat("s", MaxStreamIDLen), Payload: bytes.Repeat([]byte{0xff}, MaxPayloadLen)},
		{Seq: 42, StreamID: "job-1", Payload: nil},
		{Seq: 43, StreamID: "", Payload: []byte{0}},
	}
}

func framesEqual(a, b Frame) bool {
	return a.Seq == b.Seq && a.SentUnixNano == b.SentUnixNano && a.StreamID == b.StreamID && bytes.Equal(a.Payload, b.Payload)
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, f := range sampleFrames() {
		b, err := Encode(f)
		if err != nil {
			t.Fatalf("Encode(%+v): %v", f, err)
		}
		if len(b) != f.RecordLen() {
			t.Errorf("len = %d, RecordLen = %d", len(b), f.RecordLen())
		}
		if len(b) < MinRecordLen || len(b) > MaxRecordLen {
			t.Errorf("len = %d outside [%d, %d]", len(b), MinRecordLen, MaxRecordLen)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)): %v", f, err)
		}
		if !framesEqual(got, f) {
			t.Errorf("round trip: got %+v, want %+v", got, f)
		}
		// The decoded payload must not alias the input.
		if len(got.Payload) > 0 {
			b[HeaderLen+len(f.StreamID)] ^= 0xff
			if got.Payload[0] != f.Payload[0] {
				t.Errorf("decoded payload aliases the input")
			}
		}
	}
}

func TestEncodeLayout(t *testing.T) {
	b, err := Encode(Frame{Seq: 0x0102030405060708, SentUnixNano: 0x1112131415161718, StreamID: "ab", Payload: []byte{0xaa}})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		'N', 'S', 'K', 'F', 1, 2, 0, 1,
		1, 2, 3, 4, 5, 6, 7, 8,
		0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
		'a', 'b', 0xaa,
	}
	if !bytes.Equal(b[:len(want)], want) {
		t.Fatalf("layout:\n got % x\nwant % x", b[:len(want)], want)
	}
	if len(b) != len(want)+TrailerLen {
		t.Fatalf("len = %d, want %d", len(b), len(want)+TrailerLen)
	}
}

func TestEncodeLimits(t *testing.T) {
	for name, f := range map[string]Frame{
		"stream id": {StreamID: strings.Repeat("x", MaxStreamIDLen+1)},
		"payload":   {Payload: make([]byte, MaxPayloadLen+1)},
	} {
		t.Run(name, func(t *testing.T) {
			dst := []byte("keep")
			out, err := Append(dst, f)
			if !errors.Is(err, ErrTooLong) {
				t.Fatalf("err = %v, want ErrTooLong", err)
			}
			if string(out) != "keep" {
				t.Fatalf("dst changed to %q", out)
			}
		})
	}
}

func TestAppendConcatenates(t *testing.T) {
	var buf []byte
	fs := sampleFrames()
	for _, f := range fs {
		var err error
		if buf, err = Append(buf, f); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(bytes.NewReader(buf))
	for i, want := range fs {
		got, err := r.Read()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !framesEqual(got, want) {
			t.Fatalf("record %d: got %+v, want %+v", i, got, want)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("after last record: err = %v, want io.EOF", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	good, err := Encode(Frame{Seq: 7, StreamID: "s", Payload: []byte("pp")})
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"short header", good[:HeaderLen-1], ErrShort},
		{"header only", good[:HeaderLen], ErrShort},
		{"missing checksum byte", good[:len(good)-1], ErrShort},
		{"trailing byte", append(bytes.Clone(good), 0), ErrTrailing},
		{"bad magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b }), ErrBadMagic},
		{"version 2", mutate(func(b []byte) []byte { b[4] = 2; return b }), ErrVersion},
		{"version 0", mutate(func(b []byte) []byte { b[4] = 0; return b }), ErrVersion},
		{"payload too long", mutate(func(b []byte) []byte {
			binary.BigEndian.PutUint16(b[6:], MaxPayloadLen+1)
			return b
		}), ErrTooLong},
		{"flipped seq bit", mutate(func(b []byte) []byte { b[15] ^= 1; return b }), ErrChecksum},
		{"flipped payload bit", mutate(func(b []byte) []byte { b[HeaderLen+1] ^= 0x80; return b }), ErrChecksum},
		{"flipped checksum bit", mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrChecksum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode: err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestReaderErrors(t *testing.T) {
	good, err := Encode(Frame{Seq: 1, StreamID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("ends inside header", func(t *testing.T) {
		_, err := NewReader(bytes.NewReader(good[:3])).Read()
		if !errors.Is(err, ErrShort) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v, want ErrShort wrapping io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("ends inside body", func(t *testing.T) {
		_, err := NewReader(bytes.NewReader(good[:len(good)-2])).Read()
		if !errors.Is(err, ErrShort) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v, want ErrShort wrapping io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("ends at header", func(t *testing.T) {
		_, err := NewReader(bytes.NewReader(good[:HeaderLen])).Read()
		if !errors.Is(err, ErrShort) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v, want ErrShort wrapping io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("bad magic", func(t *testing.T) {
		_, err := NewReader(strings.NewReader(strings.Repeat("x", 100))).Read()
		if !errors.Is(err, ErrBadMagic) {
			t.Fatalf("err = %v, want ErrBadMagic", err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		if _, err := NewReader(bytes.NewReader(nil)).Read(); err != io.EOF {
			t.Fatalf("err = %v, want io.EOF", err)
		}
	})
}

// FuzzDecode feeds arbitrary bytes to the decoder of outside input (UDP
// datagrams, files). Decode must never panic, whatever it accepts must
// re-encode to the same bytes, and Reader must agree with Decode.
func FuzzDecode(f *testing.F) {
	for _, fr := range sampleFrames() {
		b, err := Encode(fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(append(b, b...))
	}
	f.Add([]byte{})
	f.Add([]byte("NSKF"))
	f.Add([]byte("NSKF\x01\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Decode(b)
		rf, rerr := NewReader(bytes.NewReader(b)).Read()
		if err != nil {
			if fr.Seq != 0 || fr.StreamID != "" || fr.Payload != nil || fr.SentUnixNano != 0 {
				t.Fatalf("Decode failed (%v) but returned a non-zero frame %+v", err, fr)
			}
			known := []error{ErrShort, ErrBadMagic, ErrVersion, ErrTooLong, ErrChecksum, ErrTrailing}
			ok := false
			for _, k := range known {
				ok = ok || errors.Is(err, k)
			}
			if !ok {
				t.Fatalf("Decode: undocumented error %v", err)
			}
			// The Reader reads a prefix; it may succeed only when b is a
			// valid record followed by more bytes.
			if rerr == nil && !errors.Is(err, ErrTrailing) {
				t.Fatalf("Reader accepted what Decode refused with %v", err)
			}
			return
		}
		if len(fr.StreamID) > MaxStreamIDLen || len(fr.Payload) > MaxPayloadLen {
			t.Fatalf("decoded frame over the limits: %d, %d", len(fr.StreamID), len(fr.Payload))
		}
		again, err := Encode(fr)
		if err != nil {
			t.Fatalf("Encode(Decode(b)): %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("not canonical:\n  in % x\n out % x", b, again)
		}
		if rerr != nil || !framesEqual(rf, fr) {
			t.Fatalf("Reader disagrees with Decode: %+v, %v; Decode gave %+v", rf, rerr, fr)
		}
	})
}
