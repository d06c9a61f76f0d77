package norsk_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/auditchain"
	"github.com/norsk-go/norsk-manager/pkg/snapshotfile"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

// stepClock is a clock that moves one minute each time it is read.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Minute)
	return c.t
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func seqs(es []*norsk.AuditLogEntry) []int64 {
	var out []int64
	for _, e := range es {
		out = append(out, e.GetSeq())
	}
	return out
}

func TestAuditLog(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	clk := &stepClock{t: t0}
	srv.SetClock(clk.now)
	m := connectTo(t, srv)
	ctx := t.Context()

	// Five entries, one minute apart (12:01 … 12:05), chained.
	var prev string
	for i := 1; i <= 5; i++ {
		kind := "note"
		if i%2 == 0 {
			kind = "release"
		}
		e, err := m.AppendAuditEntry(ctx, "deploy", kind, fmt.Sprintf(`{"n":%d}`, i))
		if err != nil {
			t.Fatal(err)
		}
		if e.GetSeq() != int64(i) || e.GetPrevHash() != prev || e.GetHash() != auditchain.EntryHash(e) {
			t.Fatalf("entry %d = %v", i, e)
		}
		if got := norsk.AuditTime(e.GetTimestampMs()); !got.Equal(t0.Add(time.Duration(i) * time.Minute)) {
			t.Errorf("entry %d time = %v", i, got)
		}
		prev = e.GetHash()
	}
	if _, err := m.AppendAuditEntry(ctx, "", "k", ""); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("append without a source: %v; want ErrInvalidArgument", err)
	}

	// Paging, newest first.
	page, err := m.GetAuditLog(ctx, norsk.AuditLogQuery{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := seqs(page.GetEntries()); fmt.Sprint(got) != "[5 4]" || page.GetNextBeforeSeq() != 4 || page.GetFirstSeq() != 1 || page.GetLastSeq() != 5 || !page.GetChainVerifiedAtBoot() {
		t.Fatalf("first page = %v, %v", got, page)
	}
	page, err = m.GetAuditLog(ctx, norsk.AuditLogQuery{Limit: 2, BeforeSeq: page.GetNextBeforeSeq()})
	if err != nil || fmt.Sprint(seqs(page.GetEntries())) != "[3 2]" {
		t.Fatalf("second page = %v, %v", page, err)
	}
	// Filters.
	for _, tc := range []struct {
		q    norsk.AuditLogQuery
		want string
	}{
		{norsk.AuditLogQuery{Kind: "release"}, "[4 2]"},
		{norsk.AuditLogQuery{Source: "other"}, "[]"},
		{norsk.AuditLogQuery{From: t0.Add(3 * time.Minute)}, "[5 4 3]"},
		{norsk.AuditLogQuery{To: t0.Add(2 * time.Minute)}, "[2 1]"},
		{norsk.AuditLogQuery{From: t0.Add(2 * time.Minute), To: t0.Add(4 * time.Minute), Kind: "note"}, "[3]"},
	} {
		page, err := m.GetAuditLog(ctx, tc.q)
		if got := fmt.Sprint(seqs(page.GetEntries())); err != nil || got != tc.want {
			t.Errorf("GetAuditLog(%+v) = %s, %v; want %s", tc.q, got, err, tc.want)
		}
	}
	for _, q := range []norsk.AuditLogQuery{
		{Limit: 1001}, {Limit: -1}, {From: t0.Add(time.Hour), To: t0}, {From: time.Unix(-5, 0)},
	} {
		if _, err := m.GetAuditLog(ctx, q); !errors.Is(err, norsk.ErrInvalidArgument) {
			t.Errorf("GetAuditLog(%+v) = %v; want ErrInvalidArgument", q, err)
		}
	}

	v, err := m.VerifyAuditLog(ctx)
	if err != nil || v.Checked != 5 || v.CheckpointSeq() != 0 || v.Checkpoint != nil || v.FirstSeq != 1 || v.LastSeq != 5 || v.Broken != nil {
		t.Fatalf("VerifyAuditLog = %+v, %v", v, err)
	}

	// Prune the entries before 12:03: 1 and 2 go, the chain still verifies
	// from the checkpoint, and a marker is appended.
	removed, ckpt, err := m.PruneAuditLog(ctx, t0.Add(3*time.Minute))
	if err != nil || removed != 2 || ckpt != 2 {
		t.Fatalf("PruneAuditLog = %d, %d, %v", removed, ckpt, err)
	}
	page, err = m.GetAuditLog(ctx, norsk.AuditLogQuery{})
	if err != nil || fmt.Sprint(seqs(page.GetEntries())) != "[6 5 4 3]" || page.GetCheckpoint().GetSeq() != 2 || page.GetEntries()[0].GetKind() != "audit-pruned" {
		t.Fatalf("after the prune: %v, %v", page, err)
	}
	v, err = m.VerifyAuditLog(ctx)
	if err != nil || v.Checked != 4 || v.CheckpointSeq() != 2 || v.FirstSeq != 3 {
		t.Fatalf("VerifyAuditLog after a prune = %+v, %v", v, err)
	}
	// The future is refused; the zero time prunes everything.
	if _, _, err := m.PruneAuditLog(ctx, time.Now().Add(24*time.Hour*365*10)); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("prune in the future: %v; want ErrInvalidArgument", err)
	}
	if removed, ckpt, err := m.PruneAuditLog(ctx, time.Time{}); err != nil || removed != 4 || ckpt != 6 {
		t.Fatalf("prune everything = %d, %d, %v", removed, ckpt, err)
	}
	v, err = m.VerifyAuditLog(ctx)
	if err != nil || v.Checked != 1 || v.CheckpointSeq() != 6 || v.LastSeq != 7 {
		t.Fatalf("VerifyAuditLog after pruning everything = %+v, %v", v, err)
	}
}

func TestVerifyAuditLogTampered(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	ctx := t.Context()
	// More than a page, so the check spans pages.
	const n = norsk.MaxAuditPage + 300
	for i := 1; i <= n; i++ {
		if _, err := m.AppendAuditEntry(ctx, "test", "step", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	v, err := m.VerifyAuditLog(ctx)
	if err != nil || v.Checked != n || v.FirstSeq != 1 || v.LastSeq != n {
		t.Fatalf("VerifyAuditLog = %+v, %v", v, err)
	}

	for _, tc := range []struct {
		name   string
		seq    int64
		edit   func(e *managerv1.AuditLogEntry)
		reason string
	}{
		{"altered payload", 150, func(e *managerv1.AuditLogEntry) { e.Payload = "forged" }, "does not match its contents"},
		{"relinked", 700, func(e *managerv1.AuditLogEntry) {
			e.PrevHash = strings.Repeat("0", 64)
			e.Hash = auditchain.EntryHash(e) // consistent in itself, but no longer linked
		}, "does not link"},
		{"renumbered", 1250, func(e *managerv1.AuditLogEntry) { e.Seq = 9999 }, "seq follows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saved := srv.AuditEntries()[tc.seq-1]
			if !srv.TamperAuditEntry(tc.seq, tc.edit) {
				t.Fatal("no such entry")
			}
			v, err := m.VerifyAuditLog(ctx)
			var be *auditchain.BrokenError
			if !errors.Is(err, norsk.ErrDataLoss) || !errors.As(err, &be) || be.Seq != tc.seq && tc.name != "renumbered" {
				t.Fatalf("VerifyAuditLog = %v; want ErrDataLoss naming entry %d", err, tc.seq)
			}
			if !strings.Contains(be.Reason, tc.reason) || v.Broken == nil || v.Broken.Seq != be.Seq || v.Checked == 0 {
				t.Errorf("broken = %v, verification %+v; want the reason %q", be, v, tc.reason)
			}
			var e *norsk.Error
			if !errors.As(err, &e) || e.Op != "VerifyAuditLog" || !strings.Contains(e.Error(), fmt.Sprintf("audit chain broken at entry %d", be.Seq)) {
				t.Errorf("error = %v", err)
			}
			// Put it back.
			srv.TamperAuditEntry(9999, func(e *managerv1.AuditLogEntry) { e.Seq = saved.Seq })
			srv.TamperAuditEntry(tc.seq, func(e *managerv1.AuditLogEntry) {
				e.Payload, e.PrevHash, e.Hash, e.Seq = saved.Payload, saved.PrevHash, saved.Hash, saved.Seq
			})
			if _, err := m.VerifyAuditLog(ctx); err != nil {
				t.Fatalf("restored chain: %v", err)
			}
		})
	}

	// The Manager's own verdict is passed through.
	srv.SetAuditBootVerdict(false, "audit chain broken at entry 3: altered")
	v, err = m.VerifyAuditLog(ctx)
	if err != nil || v.ChainVerifiedAtBoot || v.VerificationDetail != "audit chain broken at entry 3: altered" {
		t.Errorf("boot verdict = %+v, %v", v, err)
	}
}

func TestKV(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	ctx := t.Context()

	e, err := m.KvGet(ctx, "app", "a")
	if e != nil || !errors.Is(err, norsk.ErrNotFound) || !strings.Contains(err.Error(), `key "a" of namespace "app" not found`) {
		t.Fatalf("KvGet of an absent key = %v, %v; want nil and ErrNotFound naming the key", e, err)
	}
	r1, err := m.KvCommit(ctx, "app", []norsk.KvWrite{norsk.KvPut("a", []byte("1")).IfAbsent(), norsk.KvPut("b/x", nil), norsk.KvPut("b/y", []byte("y"))}, norsk.KvCommitOptions{})
	if err != nil || r1 == 0 {
		t.Fatalf("KvCommit = %d, %v", r1, err)
	}
	e, err = m.KvGet(ctx, "app", "b/x")
	if err != nil || e == nil || len(e.GetValue()) != 0 || e.GetRevision() != r1 || e.GetCreateRevision() != r1 {
		t.Fatalf("an empty value = %v, %v; want an entry", e, err)
	}
	// A guarded update, then a stale one.
	r2, err := m.KvCommit(ctx, "app", []norsk.KvWrite{norsk.KvPut("a", []byte("2")).IfRevision(r1)}, norsk.KvCommitOptions{})
	if err != nil || r2 <= r1 {
		t.Fatalf("guarded update = %d, %v", r2, err)
	}
	for _, tc := range []struct {
		writes []norsk.KvWrite
		opts   norsk.KvCommitOptions
		msg    string
	}{
		{[]norsk.KvWrite{norsk.KvPut("a", []byte("3")).IfRevision(r1)}, norsk.KvCommitOptions{}, fmt.Sprintf(`key "a" is at revision %d; the write expects %d`, r2, r1)},
		{[]norsk.KvWrite{norsk.KvPut("new", nil), norsk.KvPut("a", []byte("3")).IfAbsent()}, norsk.KvCommitOptions{}, `writes[1]: key "a" exists`},
		{[]norsk.KvWrite{norsk.KvDelete("zz").IfRevision(5)}, norsk.KvCommitOptions{}, `key "zz" does not exist`},
		{[]norsk.KvWrite{norsk.KvPut("new", nil)}, norsk.KvCommitOptions{}.ExpectingSchema(1), "at schema version 0, the commit expects 1"},
	} {
		if _, err := m.KvCommit(ctx, "app", tc.writes, tc.opts); !errors.Is(err, norsk.ErrFailedPrecondition) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("KvCommit(%v) = %v; want FAILED_PRECONDITION %q", tc.writes, err, tc.msg)
		}
	}
	if e, err := m.KvGet(ctx, "app", "new"); !errors.Is(err, norsk.ErrNotFound) {
		t.Errorf("a refused commit wrote %v (KvGet = %v; want ErrNotFound)", e, err)
	}
	// Schema versions: set, then expect and bump with a delete.
	if _, err := m.KvCommit(ctx, "app", nil, norsk.KvCommitOptions{SetSchemaVersion: norsk.Int64(1)}); err != nil {
		t.Fatal(err)
	}
	r3, err := m.KvCommit(ctx, "app", []norsk.KvWrite{norsk.KvDelete("b/y")}, norsk.KvCommitOptions{}.ExpectingSchema(1).SettingSchema(2))
	if err != nil {
		t.Fatal(err)
	}
	entries, schema, err := m.KvList(ctx, "app", "")
	if err != nil || schema != 2 || len(entries) != 2 || entries[0].GetKey() != "a" || string(entries[0].GetValue()) != "2" || entries[1].GetKey() != "b/x" {
		t.Fatalf("KvList = %v, %d, %v (after revision %d)", entries, schema, err, r3)
	}
	if entries, _, _ := m.KvList(ctx, "app", "b/"); len(entries) != 1 {
		t.Errorf("KvList prefix b/ = %v", entries)
	}
	if entries, schema, err := m.KvList(ctx, "empty", ""); err != nil || len(entries) != 0 || schema != 0 {
		t.Errorf("KvList of an empty namespace = %v, %d, %v", entries, schema, err)
	}

	// Malformed commits.
	for _, tc := range []struct {
		ns     string
		writes []norsk.KvWrite
		msg    string
	}{
		{"", []norsk.KvWrite{norsk.KvPut("k", nil)}, "namespace"},
		{"app", nil, "nothing to commit"},
		{"app", []norsk.KvWrite{norsk.KvPut("", nil)}, "writes[0].key"},
		{"app", []norsk.KvWrite{norsk.KvPut("k", nil), norsk.KvDelete("k")}, "writes[1].key"},
		{"app", []norsk.KvWrite{{Key: "k", Delete: true, Value: []byte("x")}}, "carries a value"},
		{"app", []norsk.KvWrite{norsk.KvPut("k", make([]byte, norsk.MaxKvValueLen+1))}, "at most"},
	} {
		if _, err := m.KvCommit(ctx, tc.ns, tc.writes, norsk.KvCommitOptions{}); !errors.Is(err, norsk.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("KvCommit(%q, %v) = %v; want INVALID_ARGUMENT %q", tc.ns, len(tc.writes), err, tc.msg)
		}
	}
	if _, err := m.KvGet(ctx, "app", ""); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("KvGet with no key: %v", err)
	}
	if _, _, err := m.KvList(ctx, "", ""); !errors.Is(err, norsk.ErrInvalidArgument) {
		t.Errorf("KvList with no namespace: %v", err)
	}

	// Every commit left an audit entry, as the Manager's do.
	page, err := m.GetAuditLog(ctx, norsk.AuditLogQuery{Source: "api", Kind: "KvCommit"})
	if err != nil || len(page.GetEntries()) != 4 || !strings.Contains(page.GetEntries()[0].GetPayload(), `"target":"kv/app"`) {
		t.Errorf("audit entries of the commits = %v, %v", page, err)
	}
}

func TestStoreInfoAndSnapshot(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	ctx := t.Context()

	info, err := m.GetStoreInfo(ctx)
	if err != nil || len(info.GetStores()) != 1 || info.GetStores()[0].GetSchemaVersion() != norsktest.SchemaVersion || info.GetBoot().GetBootedAt() == nil {
		t.Fatalf("GetStoreInfo = %v, %v", info, err)
	}
	srv.SetStoreInfo(&managerv1.StoreInfo{Boot: &managerv1.BootReport{Migrated: true, MigratedFrom: 1, MigratedTo: 2, PreUpgradeBackup: "/b/pre.snap"}})
	if info, err := m.GetStoreInfo(ctx); err != nil || !info.GetBoot().GetMigrated() || info.GetBoot().GetPreUpgradeBackup() != "/b/pre.snap" {
		t.Errorf("GetStoreInfo after SetStoreInfo = %v, %v", info, err)
	}

	// A snapshot of the fake's state, big enough to take several chunks.
	srv.AddNode(&managerv1.Node{NodeId: "n1"})
	big := bytes.Repeat([]byte("v"), 200<<10)
	if _, err := m.KvCommit(ctx, "app", []norsk.KvWrite{norsk.KvPut("a", big), norsk.KvPut("b", big)}, norsk.KvCommitOptions{SetSchemaVersion: norsk.Int64(3)}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := m.SnapshotSave(ctx, &buf)
	if err != nil || n != int64(buf.Len()) || n < 400<<10 {
		t.Fatalf("SnapshotSave = %d, %v (%d bytes)", n, err, buf.Len())
	}
	r := snapshotfile.NewReader(&buf)
	counts := map[string]int{}
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the snapshot does not read back: %v", err)
		}
		switch {
		case rec.GetKv() != nil:
			counts["kv"]++
		case rec.GetKvNamespace() != nil:
			counts["ns"]++
		case rec.GetNode() != nil:
			counts["node"]++
		case rec.GetAuditEntry() != nil:
			counts["audit"]++
		}
	}
	if fmt.Sprint(counts) != "map[audit:1 kv:2 node:1 ns:1]" || r.Header().GetIndex() != srv.Index() {
		t.Errorf("snapshot = %v at index %d (the fake is at %d)", counts, r.Header().GetIndex(), srv.Index())
	}

	// Errors: the stream's, and the writer's.
	srv.SetError("SnapshotSave", connect.NewError(connect.CodeUnavailable, errors.New("no primary")))
	if _, err := m.SnapshotSave(ctx, io.Discard); !errors.Is(err, norsk.ErrUnavailable) {
		t.Errorf("SnapshotSave with the server failing: %v; want ErrUnavailable", err)
	}
	srv.SetError("SnapshotSave", nil)
	diskFull := errors.New("disk full")
	n, err = m.SnapshotSave(ctx, failingWriter{after: 1000, err: diskFull})
	if !errors.Is(err, norsk.ErrUnknown) || !errors.Is(err, diskFull) || n != 1000 {
		t.Errorf("SnapshotSave to a failing writer = %d, %v", n, err)
	}
}

// failingWriter takes after bytes, then fails with err.
type failingWriter struct {
	after int
	err   error
}

func (w failingWriter) Write(p []byte) (int, error) {
	return min(len(p), w.after), w.err
}

// Every new call maps the server's status to its typed error.
func TestAuditKVStoreErrors(t *testing.T) {
	t.Parallel()
	srv := norsktest.NewServer(t)
	m := connectTo(t, srv)
	calls := map[string]func(context.Context) error{
		"AppendAuditEntry": func(ctx context.Context) error { _, err := m.AppendAuditEntry(ctx, "s", "k", ""); return err },
		"GetAuditLog":      func(ctx context.Context) error { _, err := m.GetAuditLog(ctx, norsk.AuditLogQuery{}); return err },
		"PruneAuditLog":    func(ctx context.Context) error { _, _, err := m.PruneAuditLog(ctx, time.Time{}); return err },
		"KvCommit": func(ctx context.Context) error {
			_, err := m.KvCommit(ctx, "ns", []norsk.KvWrite{norsk.KvPut("k", nil)}, norsk.KvCommitOptions{})
			return err
		},
		"KvGet":        func(ctx context.Context) error { _, err := m.KvGet(ctx, "ns", "k"); return err },
		"KvList":       func(ctx context.Context) error { _, _, err := m.KvList(ctx, "ns", ""); return err },
		"GetStoreInfo": func(ctx context.Context) error { _, err := m.GetStoreInfo(ctx); return err },
		"SnapshotSave": func(ctx context.Context) error { _, err := m.SnapshotSave(ctx, io.Discard); return err },
	}
	// KvGet of an absent key is ErrNotFound: the key exists whatever order
	// the map gives the calls in.
	if _, err := m.KvCommit(t.Context(), "ns", []norsk.KvWrite{norsk.KvPut("k", nil)}, norsk.KvCommitOptions{}); err != nil {
		t.Fatal(err)
	}
	for method, call := range calls {
		for code, want := range map[connect.Code]error{
			connect.CodeUnavailable:        norsk.ErrUnavailable,
			connect.CodeFailedPrecondition: norsk.ErrFailedPrecondition,
			connect.CodePermissionDenied:   norsk.ErrPermissionDenied,
		} {
			srv.SetError(method, connect.NewError(code, errors.New("injected")))
			err := call(t.Context())
			var e *norsk.Error
			if !errors.Is(err, want) || !errors.As(err, &e) || e.Op != method || e.Message != "injected" {
				t.Errorf("%s with %v: %v", method, code, err)
			}
		}
		srv.SetError(method, nil)
		if err := call(t.Context()); err != nil {
			t.Errorf("%s: %v", method, err)
		}
	}
	// VerifyAuditLog reports its pages' errors as its own.
	srv.SetError("GetAuditLog", connect.NewError(connect.CodeUnavailable, errors.New("no primary")))
	if _, err := m.VerifyAuditLog(t.Context()); !errors.Is(err, norsk.ErrUnavailable) || !strings.HasPrefix(err.Error(), "VerifyAuditLog: ") {
		t.Errorf("VerifyAuditLog with the server failing: %v", err)
	}
	srv.SetError("GetAuditLog", nil)
	// A closed Manager refuses them all.
	m.Close()
	for method, call := range calls {
		if err := call(t.Context()); !errors.Is(err, norsk.ErrCanceled) {
			t.Errorf("%s after Close: %v; want ErrCanceled", method, err)
		}
	}
}
