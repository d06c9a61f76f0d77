package snapshotfile_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/snapshotfile"
)

func header(v uint32, index uint64) *storev1.SnapshotRecord {
	return &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Header{Header: &storev1.SnapshotHeader{SchemaVersion: v, Index: index}}}
}

func entry(seq int64) *storev1.SnapshotRecord {
	return &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_AuditEntry{AuditEntry: &managerv1.AuditLogEntry{Seq: seq, Kind: "k", Payload: "payload"}}}
}

func write(t testing.TB, recs ...*storev1.SnapshotRecord) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := snapshotfile.NewWriter(&buf)
	for _, r := range recs {
		if err := w.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	n, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("Close counted %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

// readAll returns the records after the header, the header, and the error
// that ended the read (nil at a clean end).
func readAll(b []byte) ([]*storev1.SnapshotRecord, *storev1.SnapshotHeader, error) {
	r := snapshotfile.NewReader(bytes.NewReader(b))
	var out []*storev1.SnapshotRecord
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out, r.Header(), nil
		}
		if err != nil {
			return out, r.Header(), err
		}
		out = append(out, rec)
	}
}

func frame(b []byte) []byte { return append(binary.AppendUvarint(nil, uint64(len(b))), b...) }

func marshal(t testing.TB, r *storev1.SnapshotRecord) []byte {
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 1000} {
		recs := []*storev1.SnapshotRecord{header(2, 77)}
		for i := range n {
			recs = append(recs, entry(int64(i+1)))
		}
		data := write(t, recs...)
		got, h, err := readAll(data)
		if err != nil {
			t.Fatalf("%d records: %v", n, err)
		}
		if h.GetSchemaVersion() != 2 || h.GetIndex() != 77 {
			t.Errorf("header %v", h)
		}
		if len(got) != n {
			t.Fatalf("%d records read, wrote %d", len(got), n)
		}
		for i := range got {
			if !proto.Equal(got[i], recs[i+1]) {
				t.Fatalf("record %d: %v, wrote %v", i, got[i], recs[i+1])
			}
		}
		// Deterministic: the same records give the same bytes.
		if !bytes.Equal(write(t, recs...), data) {
			t.Error("two writes of the same records differ")
		}
	}
}

func TestReaderRefusals(t *testing.T) {
	good := write(t, header(2, 5), entry(1), entry(2))
	flipped := bytes.Clone(good)
	flipped[bytes.Index(flipped, []byte("payload"))] = 'P'
	// A correct-looking trailer that counts one record too many.
	var body []byte
	body = append(body, frame(marshal(t, header(2, 5)))...)
	body = append(body, frame(marshal(t, entry(1)))...)
	miscount := append(bytes.Clone(body), frame(marshal(t, &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Trailer{Trailer: &storev1.SnapshotTrailer{Records: 3}}}))...)
	noHeader := write(t, entry(1))
	twoHeaders := write(t, header(2, 5), header(2, 6))
	huge := append(frame(marshal(t, header(2, 5))), binary.AppendUvarint(nil, snapshotfile.MaxRecordSize+1)...)
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, snapshotfile.ErrCorrupt},
		{"garbage", []byte("this is not a snapshot at all"), snapshotfile.ErrCorrupt},
		{"header only, no trailer", frame(marshal(t, header(2, 5))), snapshotfile.ErrCorrupt},
		{"cut before the trailer", good[:len(good)-6], snapshotfile.ErrCorrupt},
		{"cut inside a record", good[:len(good)/2], snapshotfile.ErrCorrupt},
		{"data after the trailer", append(bytes.Clone(good), good[:4]...), snapshotfile.ErrCorrupt},
		{"no header", noHeader, snapshotfile.ErrCorrupt},
		{"a second header", twoHeaders, snapshotfile.ErrCorrupt},
		{"record larger than the limit", huge, snapshotfile.ErrCorrupt},
		{"a byte changed", flipped, snapshotfile.ErrChecksum},
		{"the trailer miscounts", miscount, snapshotfile.ErrChecksum},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readAll(tc.data)
			if !errors.Is(err, tc.want) {
				t.Fatalf("read = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestWriterReportsErrors: a write error surfaces from Put or Close.
func TestWriterReportsErrors(t *testing.T) {
	w := snapshotfile.NewWriter(failWriter{})
	var err error
	for i := 0; i < 10000 && err == nil; i++ {
		err = w.Put(entry(int64(i)))
	}
	if err == nil {
		_, err = w.Close()
	}
	if err == nil {
		t.Fatal("no error from a writer that cannot write")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// FuzzReader: any input either reads cleanly or fails with ErrCorrupt or
// ErrChecksum; it never panics.
func FuzzReader(f *testing.F) {
	f.Add(write(f, header(2, 5), entry(1), entry(2)))
	f.Add(write(f, header(1, 0)))
	f.Add([]byte{})
	f.Add([]byte{0x05, 0x0a, 0x03, 0x08, 0x02, 0x10})
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, h, err := readAll(data)
		switch {
		case err == nil:
			if h == nil {
				t.Fatal("a clean read without a header")
			}
			// What was read writes back into a file that reads the same.
			again, h2, err := readAll(write(t, append([]*storev1.SnapshotRecord{{Record: &storev1.SnapshotRecord_Header{Header: h}}}, recs...)...))
			if err != nil || len(again) != len(recs) || !proto.Equal(h, h2) {
				t.Fatalf("re-written file reads %d records, %v (was %d)", len(again), err, len(recs))
			}
		case errors.Is(err, snapshotfile.ErrCorrupt), errors.Is(err, snapshotfile.ErrChecksum):
		default:
			t.Fatalf("unclassified error %v", err)
		}
	})
}
