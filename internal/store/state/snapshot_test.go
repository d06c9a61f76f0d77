package state_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/snapshotfile"
)

// writeRecords writes snapshot records as WriteTo does.
// writeRecords writes records as a snapshot does, closed with a correct
// trailer (use writeRawRecords for a snapshot without one).
func writeRecords(tb testing.TB, w io.Writer, recs ...*storev1.SnapshotRecord) {
	tb.Helper()
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	writeRawRecords(tb, io.MultiWriter(w, crc), recs...)
	writeRawRecords(tb, w, &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Trailer{Trailer: &storev1.SnapshotTrailer{
		Records: uint64(len(recs)), Crc32C: crc.Sum32(),
	}}})
}

// sealRecords length-prefixes encoded records and closes them with a trailer.
func sealRecords(recs [][]byte) []byte {
	var out []byte
	for _, r := range recs {
		out = binary.AppendUvarint(out, uint64(len(r)))
		out = append(out, r...)
	}
	tr, _ := proto.Marshal(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Trailer{Trailer: &storev1.SnapshotTrailer{
		Records: uint64(len(recs)), Crc32C: crc32.Checksum(out, crc32.MakeTable(crc32.Castagnoli)),
	}}})
	out = binary.AppendUvarint(out, uint64(len(tr)))
	return append(out, tr...)
}

// writeRawRecords writes length-prefixed records, nothing more.
func writeRawRecords(tb testing.TB, w io.Writer, recs ...*storev1.SnapshotRecord) {
	tb.Helper()
	for _, r := range recs {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := w.Write(binary.AppendUvarint(nil, uint64(len(b)))); err != nil {
			tb.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			tb.Fatal(err)
		}
	}
}

// recordOffsets returns the offset of each record's length prefix, and the
// end.
func recordOffsets(tb testing.TB, b []byte) []int {
	tb.Helper()
	var offs []int
	for off := 0; off < len(b); {
		offs = append(offs, off)
		n, k := binary.Uvarint(b[off:])
		if k <= 0 {
			tb.Fatalf("bad length at %d", off)
		}
		off += k + int(n)
	}
	return append(offs, len(b))
}

func restoreInto(tb testing.TB, b []byte) *state.State {
	tb.Helper()
	s := state.New(state.Limits{})
	h, err := s.Restore(bytes.NewReader(b))
	if err != nil {
		tb.Fatalf("restore: %v", err)
	}
	// The header names the data's version: the restored state's own.
	if v := s.Snapshot().SchemaVersion(); h.GetSchemaVersion() != v && !(v == 0 && h.GetSchemaVersion() == state.SchemaVersion) {
		tb.Errorf("header schema version = %d, the data's is %d", h.GetSchemaVersion(), v)
	}
	return s
}

// sameReads compares everything a reader can ask of two states.
func sameReads(t *testing.T, a, b *state.Read) {
	t.Helper()
	if a.Index() != b.Index() {
		t.Errorf("index %d vs %d", a.Index(), b.Index())
	}
	eq := func(what string, x, y proto.Message) {
		t.Helper()
		if !proto.Equal(x, y) {
			t.Errorf("%s differs:\n%v\n%v", what, x, y)
		}
	}
	var ja, jb []*storev1.JobRecord
	a.Jobs(nil, "", func(r *storev1.JobRecord) bool { ja = append(ja, r); return true })
	b.Jobs(nil, "", func(r *storev1.JobRecord) bool { jb = append(jb, r); return true })
	if len(ja) != len(jb) {
		t.Fatalf("%d vs %d jobs", len(ja), len(jb))
	}
	for i := range ja {
		id := ja[i].GetJob().GetJobId()
		eq("job "+id, ja[i], jb[i])
		eq("Job("+id+")", a.Job(nil, id), b.Job(nil, id))
		eq("JobView("+id+")", a.JobView(ja[i], true), b.JobView(jb[i], true))
		ia, ib := a.InstancesOfJob(nil, id), b.InstancesOfJob(nil, id)
		if len(ia) != len(ib) {
			t.Fatalf("job %s: %d vs %d instances", id, len(ia), len(ib))
		}
		for k := range ia {
			eq("instance", ia[k], ib[k])
			eq("Instance()", a.Instance(nil, id, ia[k].GetRole()), b.Instance(nil, id, ia[k].GetRole()))
		}
	}
	var ia, ib []*managerv1.Instance
	a.Instances(nil, func(in *managerv1.Instance) bool { ia = append(ia, in); return true })
	b.Instances(nil, func(in *managerv1.Instance) bool { ib = append(ib, in); return true })
	if len(ia) != len(ib) {
		t.Fatalf("%d vs %d instances", len(ia), len(ib))
	}
	for k := range ia {
		eq("instance", ia[k], ib[k])
	}
	na, nb := a.Nodes(nil), b.Nodes(nil)
	if len(na) != len(nb) {
		t.Fatalf("%d vs %d nodes", len(na), len(nb))
	}
	for i := range na {
		id := na[i].GetNode().GetNodeId()
		eq("node "+id, na[i], nb[i])
		eq("NodeView("+id+")", a.NodeView(na[i]), b.NodeView(nb[i]))
		eq("SlotView("+id+")", state.SlotView(na[i]), state.SlotView(nb[i]))
		eq("NodeByName", a.NodeByName(nil, na[i].GetNode().GetNodeName()), b.NodeByName(nil, na[i].GetNode().GetNodeName()))
		eq("NodeByToken", a.NodeByToken(na[i].GetToken()), b.NodeByToken(na[i].GetToken()))
		eq("NodeBySecret", a.NodeBySecret(na[i].GetNodeSecret()), b.NodeBySecret(na[i].GetNodeSecret()))
		ia, ib := a.InstancesOnNode(nil, id), b.InstancesOnNode(nil, id)
		if len(ia) != len(ib) {
			t.Fatalf("node %s: %d vs %d instances", id, len(ia), len(ib))
		}
		for k := range ia {
			eq("instance on node", ia[k], ib[k])
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	f := world(t)
	f.must(cTags("n-other", map[string]string{"zone": "b"}))
	f.must(cIdle("n-other", 1234))
	f.must(cPool("n-reg", "gold"))
	orig := f.snap()
	var buf bytes.Buffer
	n, err := f.read().WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo = %d, %v; wrote %d", n, err, buf.Len())
	}
	if !bytes.Equal(buf.Bytes(), orig) {
		t.Fatal("two snapshots of the same state differ")
	}

	g := state.New(state.Limits{})
	old := g.Snapshot()
	h, err := g.Restore(bytes.NewReader(orig))
	if err != nil {
		t.Fatal(err)
	}
	if h.GetIndex() != f.index || h.GetSchemaVersion() != f.read().SchemaVersion() {
		t.Errorf("header = %v, want index %d and the data's schema version %d", h, f.index, f.read().SchemaVersion())
	}
	select {
	case <-old.AbandonCh():
	default:
		t.Error("a view of the replaced state was not abandoned")
	}
	select {
	case <-g.Snapshot().AbandonCh():
		t.Error("a view of the new state is abandoned")
	default:
	}
	if got := snapBytes(t, g); !bytes.Equal(got, orig) {
		t.Fatalf("restored snapshot differs: %s", diffRecords(t, orig, got))
	}
	sameReads(t, f.read(), g.Snapshot())

	// Both go on identically: indexes (secondary ones included) survive.
	gf := &fixture{tb: t, s: g, index: f.index}
	next := []func() *storev1.Command{
		func() *storev1.Command { return cOnline("n-lost", report("job-lost", "primary", 0, phaseRunning)) },
		func() *storev1.Command { return cMember("", "sec-n-online", "moved:1") },
		func() *storev1.Command { return cBind("job-pre", "primary", "n-other") },
		func() *storev1.Command { return cTerminated("n-dereg", "done") },
		func() *storev1.Command { return cDelete("job-run") },
		func() *storev1.Command { return cRegister("n-new", "name-n-new", "", "tok-n-new") },
	}
	for _, c := range next {
		ra, rb := f.apply(c()), gf.apply(c())
		if (ra.Err == nil) != (rb.Err == nil) || len(ra.Events) != len(rb.Events) {
			t.Fatalf("results differ: %v %v / %v %v", ra.Err, eventKinds(ra.Events), rb.Err, eventKinds(rb.Events))
		}
		for i := range ra.Events {
			if !proto.Equal(ra.Events[i], rb.Events[i]) {
				t.Errorf("event %d differs:\n%v\n%v", i, ra.Events[i], rb.Events[i])
			}
		}
	}
	if a, b := f.snap(), gf.snap(); !bytes.Equal(a, b) {
		t.Errorf("after the same commands: %s", diffRecords(t, a, b))
	}
	sameReads(t, f.read(), g.Snapshot())
}

func TestSnapshotOfEmptyState(t *testing.T) {
	s := state.New(state.Limits{})
	b := snapBytes(t, s)
	g := restoreInto(t, b)
	if got := snapBytes(t, g); !bytes.Equal(got, b) {
		t.Error("empty state does not round-trip")
	}
}

// TestRestoreCorrupt: a snapshot that cannot be decoded is refused with
// ErrCorruptSnapshot and leaves the state as it was.
func TestRestoreCorrupt(t *testing.T) {
	src := world(t)
	good := src.snap()
	offs := recordOffsets(t, good)
	if len(offs) < 5 {
		t.Fatalf("only %d records", len(offs)-1)
	}
	mid := offs[len(offs)/2]
	last := offs[len(offs)-2]
	// withLen replaces the length prefix of the record at off.
	withLen := func(off int, delta int64, set uint64) []byte {
		n, k := binary.Uvarint(good[off:])
		nl := uint64(int64(n) + delta)
		if set != 0 {
			nl = set
		}
		out := append([]byte{}, good[:off]...)
		out = binary.AppendUvarint(out, nl)
		return append(out, good[off+k:]...)
	}
	rec := func(r *storev1.SnapshotRecord) []byte {
		var b bytes.Buffer
		writeRecords(t, &b, r)
		return b.Bytes()
	}
	header := rec(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Header{Header: &storev1.SnapshotHeader{SchemaVersion: 1, Index: 3}}})
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(rng.UintN(256))
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated in the first length", good[:0:0]},
		{"truncated in the header", good[:3]},
		{"truncated mid-record", good[:mid+3]},
		{"truncated by one byte", good[:len(good)-1]},
		{"header length +1", withLen(0, 1, 0)},
		{"header length -1", withLen(0, -1, 0)},
		{"middle length +1", withLen(mid, 1, 0)},
		{"middle length -1", withLen(mid, -1, 0)},
		{"last length +1", withLen(last, 1, 0)},
		{"last length -1", withLen(last, -1, 0)},
		{"length over the limit", withLen(mid, 0, snapshotfile.MaxRecordSize+1)},
		{"length overflows", cat(header, bytes.Repeat([]byte{0xff}, 11))},
		{"garbage", garbage},
		{"text", []byte("this is not a snapshot at all, it is a sentence")},
		{"no header", cat(rec(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Node{Node: &storev1.NodeRecord{Node: &managerv1.Node{NodeId: "n", NodeName: "n"}}}}), header)},
		{"unknown first record", cat(rec(&storev1.SnapshotRecord{}), header)},
		{"two headers", cat(header, header)},
		{"record that is not protobuf", cat(header, []byte{3, 0xff, 0xff, 0xff})},
		{"job without a job", cat(header, rec(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Job{Job: &storev1.JobRecord{}}}))},
		{"node without an id", cat(header, rec(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Node{Node: &storev1.NodeRecord{Node: &managerv1.Node{NodeName: "x"}}}}))},
		{"instance without a node", cat(header, rec(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Instance{Instance: &managerv1.Instance{JobId: "j", Role: "r"}}}))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := world(t)
			before := f.snap()
			old := f.read()
			h, err := f.s.Restore(bytes.NewReader(tt.data))
			if !errors.Is(err, state.ErrCorruptSnapshot) {
				t.Fatalf("Restore = %v, %v; want ErrCorruptSnapshot", h, err)
			}
			if h != nil {
				t.Errorf("header %v returned with an error", h)
			}
			if after := f.snap(); !bytes.Equal(after, before) {
				t.Errorf("a refused restore changed the state: %s", diffRecords(t, before, after))
			}
			select {
			case <-old.AbandonCh():
				t.Error("a refused restore abandoned the current state")
			default:
			}
		})
	}
	t.Run("every cut inside a record", func(t *testing.T) {
		boundary := map[int]bool{}
		for _, o := range offs {
			boundary[o] = true
		}
		s := state.New(state.Limits{})
		before := snapBytes(t, s)
		for cut := 1; cut < len(good); cut++ {
			if boundary[cut] {
				continue
			}
			if _, err := s.Restore(bytes.NewReader(good[:cut])); !errors.Is(err, state.ErrCorruptSnapshot) {
				t.Fatalf("cut at %d of %d: %v, want ErrCorruptSnapshot", cut, len(good), err)
			}
		}
		if !bytes.Equal(snapBytes(t, s), before) {
			t.Error("refused restores changed the state")
		}
	})
}

// TestRestoreTruncatedAtRecordBoundary: a snapshot cut between two records
// has lost rows; it must not restore as if it were whole.
func TestRestoreTruncatedAtRecordBoundary(t *testing.T) {
	f := world(t)
	good := f.snap()
	offs := recordOffsets(t, good)
	for _, cut := range offs[1 : len(offs)-1] {
		s := state.New(state.Limits{})
		if _, err := s.Restore(bytes.NewReader(good[:cut])); !errors.Is(err, state.ErrCorruptSnapshot) {
			t.Errorf("cut at record boundary %d of %d: %v, want ErrCorruptSnapshot", cut, len(good), err)
		}
	}
}

func TestRestoreNewerSchema(t *testing.T) {
	f := world(t)
	before := f.snap()
	var b bytes.Buffer
	writeRecords(t, &b, &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Header{Header: &storev1.SnapshotHeader{SchemaVersion: state.SchemaVersion + 1, Index: 1}}})
	_, err := f.s.Restore(&b)
	if err == nil || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("Restore = %v, want a refusal telling to upgrade", err)
	}
	if !bytes.Equal(f.snap(), before) {
		t.Error("state changed")
	}
}

// TestRestoreSkipsUnknownRecords: a record type from a newer binary of the
// same schema version is skipped.
func TestRestoreSkipsUnknownRecords(t *testing.T) {
	f := newFixture(t)
	f.onlineNode("n1")
	good := f.snap()
	recs, err := splitRecords(good)
	if err != nil {
		t.Fatal(err)
	}
	// Field 99, bytes "x": a record kind this binary does not know, written
	// by a newer binary (whose trailer counts and sums it).
	unknown := []byte{0x9a, 0x06, 1, 'x'}
	body := append([][]byte{recs[0], unknown}, recs[1:len(recs)-1]...)
	data := sealRecords(body)
	g := restoreInto(t, data)
	if got := snapBytes(t, g); !bytes.Equal(got, good) {
		t.Errorf("restored state differs: %s", diffRecords(t, good, got))
	}
}
