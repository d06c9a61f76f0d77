package state_test

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// --- KV helpers ---

func rev(n uint64) *uint64 { return &n }

func schemaVersion(n int64) *int64 { return &n }

func kvPut(key, value string, expected *uint64) *managerv1.KvWrite {
	return &managerv1.KvWrite{Key: key, Op: &managerv1.KvWrite_Put{Put: []byte(value)}, ExpectedRevision: expected}
}

func kvDel(key string, expected *uint64) *managerv1.KvWrite {
	return &managerv1.KvWrite{Key: key, Op: &managerv1.KvWrite_Delete{Delete: true}, ExpectedRevision: expected}
}

func cKV(ns string, opts *managerv1.KvCommitOptions, writes ...*managerv1.KvWrite) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_KvCommit{KvCommit: &storev1.KvCommit{Namespace: ns, Writes: writes, Options: opts}}}
}

// kvEntry is a key's entry, or nil.
func (f *fixture) kvEntry(ns, key string) *managerv1.KvEntry {
	return f.read().KVGet(nil, ns, key).GetEntry()
}

func (f *fixture) kvCommitted(cmd *storev1.Command) *managerv1.KvCommitResponse {
	f.tb.Helper()
	res := f.must(cmd)
	resp, ok := res.Value.(*managerv1.KvCommitResponse)
	if !ok {
		f.tb.Fatalf("answer %T, want *KvCommitResponse", res.Value)
	}
	if resp.GetRevision() != f.index {
		f.tb.Errorf("revision %d, want the index %d", resp.GetRevision(), f.index)
	}
	return resp
}

func kvKeys(r *state.Read, ns, prefix string) []string {
	var out []string
	r.KVList(nil, ns, prefix, func(rec *storev1.KvRecord) bool {
		out = append(out, rec.GetEntry().GetKey())
		return true
	})
	return out
}

// --- preconditions ---

// TestKvCommitPreconditions walks one key and one namespace through every
// precondition path; each refusal changes nothing (fixture.refused compares
// the whole state).
func TestKvCommitPreconditions(t *testing.T) {
	f := newFixture(t)
	var created, last uint64
	steps := []struct {
		name string
		cmd  func() *storev1.Command
		// refused, and words its message must contain
		code  apierr.Code
		words []string
		check func(t *testing.T)
	}{
		{name: "create with expected 0", cmd: func() *storev1.Command { return cKV("ns", nil, kvPut("a", "1", rev(0))) }, check: func(t *testing.T) {
			e := f.kvEntry("ns", "a")
			created, last = f.index, f.index
			if e.GetRevision() != created || e.GetCreateRevision() != created || string(e.GetValue()) != "1" {
				t.Errorf("entry %v, want value 1 at %d/%d", e, created, created)
			}
		}},
		{name: "expected 0 on an existing key", cmd: func() *storev1.Command { return cKV("ns", nil, kvPut("a", "2", rev(0))) },
			code: apierr.FailedPrecondition, words: []string{"writes[0]", `"a"`, "exists"}},
		{name: "expected N on an absent key", cmd: func() *storev1.Command { return cKV("ns", nil, kvPut("b", "2", rev(5))) },
			code: apierr.FailedPrecondition, words: []string{"writes[0]", `"b"`, "does not exist", "5"}},
		{name: "wrong revision", cmd: func() *storev1.Command { return cKV("ns", nil, kvPut("a", "2", rev(last+1))) },
			code: apierr.FailedPrecondition, words: []string{"writes[0]", "is at revision"}},
		{name: "update at the right revision keeps create_revision", cmd: func() *storev1.Command { return cKV("ns", nil, kvPut("a", "2", rev(last))) }, check: func(t *testing.T) {
			e := f.kvEntry("ns", "a")
			if e.GetRevision() != f.index || e.GetCreateRevision() != created || string(e.GetValue()) != "2" {
				t.Errorf("entry %v, want value 2 at %d created %d", e, f.index, created)
			}
			last = f.index
		}},
		{name: "older revision", cmd: func() *storev1.Command { return cKV("ns", nil, kvPut("a", "2", rev(created))) },
			code: apierr.FailedPrecondition, words: []string{"is at revision"}},
		{name: "update without expectation", cmd: func() *storev1.Command { return cKV("ns", nil, kvPut("a", "3", nil)) }, check: func(t *testing.T) {
			e := f.kvEntry("ns", "a")
			if e.GetRevision() != f.index || e.GetCreateRevision() != created {
				t.Errorf("entry %v", e)
			}
			last = f.index
		}},
		{name: "empty value is a value", cmd: func() *storev1.Command { return cKV("ns", nil, kvPut("empty", "", nil)) }, check: func(t *testing.T) {
			if e := f.kvEntry("ns", "empty"); e == nil || len(e.GetValue()) != 0 {
				t.Errorf("entry %v", e)
			}
		}},
		{name: "delete at a wrong revision", cmd: func() *storev1.Command { return cKV("ns", nil, kvDel("a", rev(created))) },
			code: apierr.FailedPrecondition, words: []string{"is at revision"}},
		{name: "delete expecting absence of an existing key", cmd: func() *storev1.Command { return cKV("ns", nil, kvDel("a", rev(0))) },
			code: apierr.FailedPrecondition, words: []string{"exists"}},
		{name: "delete at the right revision", cmd: func() *storev1.Command { return cKV("ns", nil, kvDel("a", rev(last))) }, check: func(t *testing.T) {
			if e := f.kvEntry("ns", "a"); e != nil {
				t.Errorf("deleted key still there: %v", e)
			}
		}},
		{name: "deleted key cannot be updated at its old revision", cmd: func() *storev1.Command { return cKV("ns", nil, kvPut("a", "x", rev(last))) },
			code: apierr.FailedPrecondition, words: []string{"does not exist"}},
		{name: "recreate after delete has a new create_revision", cmd: func() *storev1.Command { return cKV("ns", nil, kvPut("a", "4", rev(0))) }, check: func(t *testing.T) {
			e := f.kvEntry("ns", "a")
			if e.GetCreateRevision() != f.index || e.GetRevision() != f.index {
				t.Errorf("entry %v, want created afresh at %d", e, f.index)
			}
		}},
		{name: "delete of an absent key without expectation", cmd: func() *storev1.Command { return cKV("ns", nil, kvDel("never", nil)) }},
		{name: "delete of an absent key expecting absence", cmd: func() *storev1.Command { return cKV("ns", nil, kvDel("never", rev(0))) }},
		{name: "expected schema 0 on a namespace never versioned", cmd: func() *storev1.Command {
			return cKV("ns", &managerv1.KvCommitOptions{ExpectedSchemaVersion: schemaVersion(0)}, kvPut("s", "x", nil))
		}},
		{name: "schema mismatch", cmd: func() *storev1.Command {
			return cKV("ns", &managerv1.KvCommitOptions{ExpectedSchemaVersion: schemaVersion(1)}, kvPut("s", "y", nil))
		}, code: apierr.FailedPrecondition, words: []string{`"ns"`, "schema version 0", "expects 1"}},
		{name: "set the schema version alone", cmd: func() *storev1.Command {
			return cKV("ns", &managerv1.KvCommitOptions{SetSchemaVersion: schemaVersion(3)})
		}, check: func(t *testing.T) {
			if v := f.read().KVSchemaVersion(nil, "ns"); v != 3 {
				t.Errorf("schema version %d, want 3", v)
			}
		}},
		{name: "schema versions are per namespace", cmd: func() *storev1.Command {
			return cKV("other", &managerv1.KvCommitOptions{ExpectedSchemaVersion: schemaVersion(0)}, kvPut("a", "o", rev(0)))
		}},
		{name: "schema mismatch after set", cmd: func() *storev1.Command {
			return cKV("ns", &managerv1.KvCommitOptions{ExpectedSchemaVersion: schemaVersion(2), SetSchemaVersion: schemaVersion(4)}, kvPut("s", "y", nil))
		}, code: apierr.FailedPrecondition, words: []string{"schema version 3", "expects 2"}},
		{name: "migrate: expect 3, set 4, with writes", cmd: func() *storev1.Command {
			return cKV("ns", &managerv1.KvCommitOptions{ExpectedSchemaVersion: schemaVersion(3), SetSchemaVersion: schemaVersion(4)}, kvPut("s", "v4", nil), kvDel("empty", nil))
		}, check: func(t *testing.T) {
			if v := f.read().KVSchemaVersion(nil, "ns"); v != 4 {
				t.Errorf("schema version %d, want 4", v)
			}
			if string(f.kvEntry("ns", "s").GetValue()) != "v4" || f.kvEntry("ns", "empty") != nil {
				t.Error("the writes of the migrating commit did not apply")
			}
		}},
		{name: "set the schema version back down", cmd: func() *storev1.Command {
			return cKV("ns", &managerv1.KvCommitOptions{SetSchemaVersion: schemaVersion(0)})
		}, check: func(t *testing.T) {
			if v := f.read().KVSchemaVersion(nil, "ns"); v != 0 {
				t.Errorf("schema version %d, want 0", v)
			}
		}},
	}
	for _, s := range steps {
		cmd := s.cmd()
		if s.code != 0 {
			f.refused(cmd, s.code, s.words...)
			continue
		}
		resp := f.kvCommitted(cmd)
		if want := f.read().KVSchemaVersion(nil, cmd.GetKvCommit().GetNamespace()); resp.GetSchemaVersion() != want {
			t.Errorf("%s: answer schema version %d, want %d", s.name, resp.GetSchemaVersion(), want)
		}
		if s.check != nil {
			t.Run(s.name, s.check)
		}
	}
	if v := f.read().KVSchemaVersion(nil, "other"); v != 0 {
		t.Errorf("namespace other schema %d, want 0", v)
	}
	if string(f.kvEntry("other", "a").GetValue()) != "o" || string(f.kvEntry("ns", "a").GetValue()) != "4" {
		t.Error("namespaces are not separate")
	}
}

// TestKvCommitAllOrNothing: one failing precondition among several writes
// (at any position) changes nothing, not even the schema version.
func TestKvCommitAllOrNothing(t *testing.T) {
	setup := func(t *testing.T) (*fixture, uint64) {
		f := newFixture(t)
		f.kvCommitted(cKV("ns", &managerv1.KvCommitOptions{SetSchemaVersion: schemaVersion(1)}, kvPut("x", "1", nil), kvPut("y", "1", nil)))
		return f, f.index
	}
	for pos := 0; pos < 4; pos++ {
		t.Run(fmt.Sprintf("failing write at %d", pos), func(t *testing.T) {
			f, r := setup(t)
			writes := []*managerv1.KvWrite{
				kvPut("x", "2", rev(r)),
				kvDel("y", rev(r)),
				kvPut("new", "2", rev(0)),
				kvPut("z", "2", nil),
			}
			switch pos {
			case 0:
				writes[0].ExpectedRevision = rev(r + 7)
			case 1:
				writes[1].ExpectedRevision = rev(0)
			case 2:
				writes[2].ExpectedRevision = rev(r)
			case 3:
				writes[3].ExpectedRevision = rev(0)
				writes[3].Key = "x"
				writes[0].Key = "w"
				writes[0].ExpectedRevision = nil
			}
			f.refused(cKV("ns", &managerv1.KvCommitOptions{ExpectedSchemaVersion: schemaVersion(1), SetSchemaVersion: schemaVersion(2)}, writes...),
				apierr.FailedPrecondition, fmt.Sprintf("writes[%d]", pos))
		})
	}
	t.Run("all pass", func(t *testing.T) {
		f, r := setup(t)
		f.kvCommitted(cKV("ns", &managerv1.KvCommitOptions{ExpectedSchemaVersion: schemaVersion(1), SetSchemaVersion: schemaVersion(2)},
			kvPut("x", "2", rev(r)), kvDel("y", rev(r)), kvPut("new", "2", rev(0)), kvPut("z", "2", nil)))
		if got := strings.Join(kvKeys(f.read(), "ns", ""), ","); got != "new,x,z" {
			t.Errorf("keys %s", got)
		}
		for _, k := range []string{"new", "x", "z"} {
			if e := f.kvEntry("ns", k); e.GetRevision() != f.index || string(e.GetValue()) != "2" {
				t.Errorf("%s = %v", k, e)
			}
		}
		if f.read().KVSchemaVersion(nil, "ns") != 2 {
			t.Error("schema version not set")
		}
	})
}

// TestKvListPrefixAndNamespaces: listing is in key order, by prefix, and a
// namespace that is a prefix of another does not see the other's keys.
func TestKvListPrefixAndNamespaces(t *testing.T) {
	f := newFixture(t)
	f.kvCommitted(cKV("a", nil, kvPut("k2", "", nil), kvPut("k1", "", nil), kvPut("j", "", nil), kvPut("k10", "", nil)))
	f.kvCommitted(cKV("ab", nil, kvPut("k3", "", nil)))
	f.kvCommitted(cKV("a/b", nil, kvPut("k4", "", nil)))
	for _, tc := range []struct{ ns, prefix, want string }{
		{"a", "", "j,k1,k10,k2"},
		{"a", "k", "k1,k10,k2"},
		{"a", "k1", "k1,k10"},
		{"a", "x", ""},
		{"ab", "", "k3"},
		{"a/b", "", "k4"},
		{"b", "", ""},
	} {
		if got := strings.Join(kvKeys(f.read(), tc.ns, tc.prefix), ","); got != tc.want {
			t.Errorf("KVList(%q, %q) = %s, want %s", tc.ns, tc.prefix, got, tc.want)
		}
	}
}

// --- limits ---

func TestKvCommitLimits(t *testing.T) {
	big := strings.Repeat("v", jobspec.MaxKVValueLen)
	many := func(n int) []*managerv1.KvWrite {
		out := make([]*managerv1.KvWrite, n)
		for i := range out {
			out[i] = kvPut(fmt.Sprintf("k%03d", i), "v", nil)
		}
		return out
	}
	bigWrites := func(n int) []*managerv1.KvWrite {
		out := make([]*managerv1.KvWrite, n)
		for i := range out {
			out[i] = kvPut(fmt.Sprintf("k%03d", i), big, nil)
		}
		return out
	}
	cases := []struct {
		name   string
		ns     string
		opts   *managerv1.KvCommitOptions
		writes []*managerv1.KvWrite
		field  string // "" = accepted
	}{
		{"empty namespace", "", nil, []*managerv1.KvWrite{kvPut("k", "v", nil)}, "namespace"},
		{"long namespace", strings.Repeat("n", jobspec.MaxKVNamespaceLen+1), nil, []*managerv1.KvWrite{kvPut("k", "v", nil)}, "namespace"},
		{"namespace at the limit", strings.Repeat("n", jobspec.MaxKVNamespaceLen), nil, []*managerv1.KvWrite{kvPut("k", "v", nil)}, ""},
		{"namespace not UTF-8", "ns\xff", nil, []*managerv1.KvWrite{kvPut("k", "v", nil)}, "namespace"},
		{"namespace with NUL", "n\x00s", nil, []*managerv1.KvWrite{kvPut("k", "v", nil)}, "namespace"},
		{"empty key", "ns", nil, []*managerv1.KvWrite{kvPut("", "v", nil)}, "writes[0].key"},
		{"long key", "ns", nil, []*managerv1.KvWrite{kvPut("ok", "v", nil), kvPut(strings.Repeat("k", jobspec.MaxKVKeyLen+1), "v", nil)}, "writes[1].key"},
		{"key at the limit", "ns", nil, []*managerv1.KvWrite{kvPut(strings.Repeat("k", jobspec.MaxKVKeyLen), "v", nil)}, ""},
		{"key with NUL", "ns", nil, []*managerv1.KvWrite{kvPut("a\x00b", "v", nil)}, "writes[0].key"},
		{"key not UTF-8", "ns", nil, []*managerv1.KvWrite{kvPut("\xc3", "v", nil)}, "writes[0].key"},
		{"oversize value", "ns", nil, []*managerv1.KvWrite{kvPut("k", big+"v", nil)}, "writes[0].put"},
		{"value at the limit", "ns", nil, []*managerv1.KvWrite{kvPut("k", big, nil)}, ""},
		{"values over the commit total", "ns", nil, bigWrites(jobspec.MaxKVCommitPayload/jobspec.MaxKVValueLen + 1), "writes"},
		{"values at the commit total", "ns", nil, bigWrites(jobspec.MaxKVCommitPayload / jobspec.MaxKVValueLen), ""},
		{"duplicate key", "ns", nil, []*managerv1.KvWrite{kvPut("k", "v", nil), kvPut("j", "v", nil), kvDel("k", nil)}, "writes[2].key"},
		{"too many writes", "ns", nil, many(jobspec.MaxKVWrites + 1), "writes"},
		{"writes at the limit", "ns", nil, many(jobspec.MaxKVWrites), ""},
		{"empty commit", "ns", nil, nil, "writes"},
		{"empty commit with only an expectation", "ns", &managerv1.KvCommitOptions{ExpectedSchemaVersion: schemaVersion(0)}, nil, "writes"},
		{"nil write", "ns", nil, []*managerv1.KvWrite{nil}, "writes[0]"},
		{"write with no op", "ns", nil, []*managerv1.KvWrite{{Key: "k"}}, "writes[0]"},
		{"delete false", "ns", nil, []*managerv1.KvWrite{{Key: "k", Op: &managerv1.KvWrite_Delete{Delete: false}}}, "writes[0].delete"},
		{"negative expected schema", "ns", &managerv1.KvCommitOptions{ExpectedSchemaVersion: schemaVersion(-1)}, []*managerv1.KvWrite{kvPut("k", "v", nil)}, "options.expectedSchemaVersion"},
		{"negative set schema", "ns", &managerv1.KvCommitOptions{SetSchemaVersion: schemaVersion(-1)}, nil, "options.setSchemaVersion"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.kvCommitted(cKV("ns", nil, kvPut("pre", "existing", nil)))
			opts := tc.opts
			if opts == nil {
				opts = &managerv1.KvCommitOptions{}
			}
			verr := jobspec.ValidateKVCommit(tc.ns, tc.writes, opts)
			cmd := cKV(tc.ns, tc.opts, tc.writes...)
			if tc.field == "" {
				if verr != nil {
					t.Fatalf("ValidateKVCommit = %v", verr)
				}
				f.kvCommitted(cmd)
				return
			}
			var ve *apierr.Error
			if !errors.As(verr, &ve) || ve.Code != apierr.InvalidArgument || ve.Field != tc.field {
				t.Errorf("ValidateKVCommit = %v, want INVALID_ARGUMENT on %s", verr, tc.field)
			}
			// The FSM does not validate (decision 0046): the handler
			// refused the commit before it was proposed.
		})
	}
}

// --- property: KvCommit against a model ---

type modelEntry struct {
	value           []byte
	rev, createdRev uint64
}

type kvModel struct {
	keys   map[string]map[string]modelEntry
	schema map[string]int64
}

// commit applies a commit to the model, returning the code (0 = applied)
// and for a write precondition failure the index of the write that failed.
func (m *kvModel) commit(index uint64, c *storev1.KvCommit) (apierr.Code, int) {
	ns := c.GetNamespace()
	opts := c.GetOptions()
	seen := map[string]bool{}
	for _, w := range c.GetWrites() {
		if seen[w.GetKey()] {
			return apierr.InvalidArgument, -1
		}
		seen[w.GetKey()] = true
	}
	if len(c.GetWrites()) == 0 && opts.SetSchemaVersion == nil {
		return apierr.InvalidArgument, -1
	}
	if opts.ExpectedSchemaVersion != nil && opts.GetExpectedSchemaVersion() != m.schema[ns] {
		return apierr.FailedPrecondition, -1
	}
	for i, w := range c.GetWrites() {
		if w.ExpectedRevision != nil && m.keys[ns][w.GetKey()].rev != w.GetExpectedRevision() {
			return apierr.FailedPrecondition, i
		}
	}
	if m.keys[ns] == nil {
		m.keys[ns] = map[string]modelEntry{}
	}
	for _, w := range c.GetWrites() {
		cur, ok := m.keys[ns][w.GetKey()]
		if w.GetDelete() {
			delete(m.keys[ns], w.GetKey())
			continue
		}
		e := modelEntry{value: w.GetPut(), rev: index, createdRev: index}
		if ok {
			e.createdRev = cur.createdRev
		}
		m.keys[ns][w.GetKey()] = e
	}
	if opts.SetSchemaVersion != nil {
		m.schema[ns] = opts.GetSetSchemaVersion()
	}
	return 0, -1
}

var (
	propNamespaces = []string{"a", "b", "a/x"}
	propKeys       = []string{"k0", "k1", "k2", "k3/x"}
)

func TestKvCommitMatchesModel(t *testing.T) {
	// outcomes counts the codes seen, so the generator is known to reach
	// every path.
	outcomes := map[apierr.Code]int{}
	rapid.Check(t, func(t *rapid.T) {
		s := state.New(state.Limits{})
		m := &kvModel{keys: map[string]map[string]modelEntry{}, schema: map[string]int64{}}
		var index uint64
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for step := 0; step < steps; step++ {
			index++
			if rapid.IntRange(0, 9).Draw(t, "noop") == 0 {
				// Other commands take indexes too: revisions have gaps.
				s.ApplyNoop(index)
				continue
			}
			ns := rapid.SampledFrom(propNamespaces).Draw(t, "ns")
			n := rapid.IntRange(0, 4).Draw(t, "writes")
			var writes []*managerv1.KvWrite
			// Distinct keys mostly; now and then one twice (refused).
			keys := rapid.Permutation(propKeys).Draw(t, "keys")[:n]
			if n > 1 && rapid.IntRange(0, 9).Draw(t, "dup") == 0 {
				keys[n-1] = keys[0]
			}
			for i := 0; i < n; i++ {
				key := keys[i]
				var w *managerv1.KvWrite
				if rapid.IntRange(0, 3).Draw(t, "delete") == 0 {
					w = kvDel(key, nil)
				} else {
					w = kvPut(key, rapid.StringN(0, 3, 8).Draw(t, "value"), nil)
				}
				cur := m.keys[ns][key].rev
				switch rapid.IntRange(0, 4).Draw(t, "expect") {
				case 0:
				case 1:
					w.ExpectedRevision = rev(0)
				case 2, 3:
					w.ExpectedRevision = rev(cur)
				case 4:
					w.ExpectedRevision = rev(rapid.Uint64Range(1, index+2).Draw(t, "expectedRev"))
				}
				writes = append(writes, w)
			}
			opts := &managerv1.KvCommitOptions{}
			switch rapid.IntRange(0, 3).Draw(t, "expectSchema") {
			case 1:
				opts.ExpectedSchemaVersion = schemaVersion(m.schema[ns])
			case 2:
				opts.ExpectedSchemaVersion = schemaVersion(rapid.Int64Range(0, 3).Draw(t, "expectedSchema"))
			}
			if rapid.IntRange(0, 3).Draw(t, "setSchema") == 0 {
				opts.SetSchemaVersion = schemaVersion(rapid.Int64Range(0, 3).Draw(t, "schema"))
			}
			cmd := cKV(ns, opts, writes...)
			cmd.Time = stamp(index)
			before := snapBytes(t, s)
			wantCode, wantWrite := m.commit(index, cmd.GetKvCommit())
			if err := jobspec.ValidateKVCommit(ns, writes, opts); err != nil {
				// The handler refuses it; it is never proposed, and the
				// FSM does not validate again (decision 0046).
				if wantCode != apierr.InvalidArgument {
					t.Fatalf("step %d: commit %v: ValidateKVCommit refuses (%v), model says %v", step, cmd.GetKvCommit(), err, wantCode)
				}
				outcomes[apierr.InvalidArgument]++
				s.ApplyNoop(index)
				continue
			}
			res := s.Apply(index, cmd)
			outcomes[codeOrZero(res.Err)]++
			if got := codeOrZero(res.Err); got != wantCode {
				t.Fatalf("step %d: commit %v: code %v (%v), model says %v", step, cmd.GetKvCommit(), got, res.Err, wantCode)
			}
			if wantCode != 0 {
				if wantWrite >= 0 && !strings.Contains(res.Err.Error(), fmt.Sprintf("writes[%d]", wantWrite)) {
					t.Fatalf("step %d: error %q does not name writes[%d]", step, res.Err, wantWrite)
				}
				if d := diffRecords(t, before, snapBytes(t, s)); d != "" {
					t.Fatalf("step %d: a refused commit changed the state: %s", step, d)
				}
			} else {
				resp := res.Value.(*managerv1.KvCommitResponse)
				if resp.GetRevision() != index || resp.GetSchemaVersion() != m.schema[ns] {
					t.Fatalf("step %d: answer %v, want revision %d schema %d", step, resp, index, m.schema[ns])
				}
			}
			checkKVModel(t, s.Snapshot(), m)
		}
		// Snapshot round trip: the restored state reads the same, and
		// writes the same snapshot.
		snap := snapBytes(t, s)
		g := state.New(state.Limits{})
		if _, err := g.Restore(bytes.NewReader(snap)); err != nil {
			t.Fatalf("restore: %v", err)
		}
		checkKVModel(t, g.Snapshot(), m)
		if !bytes.Equal(snapBytes(t, g), snap) {
			t.Fatal("the restored state's snapshot differs")
		}
	})
	t.Logf("outcomes: %d applied, %d FAILED_PRECONDITION, %d INVALID_ARGUMENT",
		outcomes[0], outcomes[apierr.FailedPrecondition], outcomes[apierr.InvalidArgument])
	if !t.Failed() && (outcomes[0] == 0 || outcomes[apierr.FailedPrecondition] == 0 || outcomes[apierr.InvalidArgument] == 0) {
		t.Errorf("the generator missed a path: %v", outcomes)
	}
}

func codeOrZero(err error) apierr.Code {
	if err == nil {
		return 0
	}
	return apierr.CodeOf(err)
}

// checkKVModel compares every read of the KV store with the model.
func checkKVModel(t *rapid.T, r *state.Read, m *kvModel) {
	for _, ns := range propNamespaces {
		if got := r.KVSchemaVersion(nil, ns); got != m.schema[ns] {
			t.Fatalf("namespace %s schema %d, model %d", ns, got, m.schema[ns])
		}
		var want []string
		for k := range m.keys[ns] {
			want = append(want, k)
		}
		sort.Strings(want)
		if got := kvKeys(r, ns, ""); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("namespace %s keys %v, model %v", ns, got, want)
		}
		for _, k := range propKeys {
			rec := r.KVGet(nil, ns, k)
			me, ok := m.keys[ns][k]
			if (rec != nil) != ok {
				t.Fatalf("%s/%s: present %v, model %v", ns, k, rec != nil, ok)
			}
			if !ok {
				continue
			}
			want := &managerv1.KvEntry{Key: k, Value: me.value, Revision: me.rev, CreateRevision: me.createdRev}
			if len(want.Value) == 0 {
				want.Value = nil
			}
			got := proto.Clone(rec.GetEntry()).(*managerv1.KvEntry)
			if len(got.Value) == 0 {
				got.Value = nil
			}
			if !proto.Equal(got, want) || rec.GetNamespace() != ns {
				t.Fatalf("%s/%s = %v, model %v", ns, k, rec, want)
			}
		}
	}
}
