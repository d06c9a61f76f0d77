package auditchain_test

import (
	"errors"
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/auditchain"
)

// TestHashIsStable pins the hash: clients re-verify chains with their own
// copy of this package, so a change is a format change.
func TestHashIsStable(t *testing.T) {
	got := auditchain.Hash("", 1, 1767323045000, "api", "CreateJob", `{"who":"peer:127.0.0.1:1"}`)
	// Computed independently from the documented encoding (domain
	// "norsk-audit-v1\x00", 8-byte big-endian lengths and integers, the
	// timestamp's IEEE-754 bits) with Python's hashlib.
	const want = "144b67025a55b3be847ccd7678bd83a6bdfcaf6b20c40bbbcbd784e43ed12f61"
	if got != want {
		t.Errorf("Hash = %s, want %s: the chain format changed", got, want)
	}
}

// TestHashWithCallerIsStable pins format 2 the same way.
func TestHashWithCallerIsStable(t *testing.T) {
	got := auditchain.HashWithCaller("", 1, 1767323045000, "external/norsk-mgr", "failover", `{"from":"a"}`, "token:ops-alice/1f2e", "1f2e")
	// Python: sha256(b"norsk-audit-v2\x00" + lp("") + be64(1) + be64(bits) +
	// lp(source) + lp(kind) + lp(payload) + lp(caller) + lp(callerTokenId)).
	const want = "589769862ebee04a18c25aa65034f6d04996fe1b047a90e02898cdc30aea4e10"
	if got != want {
		t.Errorf("HashWithCaller = %s, want %s: the chain format changed", got, want)
	}
	if v1 := auditchain.Hash("", 1, 1767323045000, "external/norsk-mgr", "failover", `{"from":"a"}`); v1 == got {
		t.Error("formats 1 and 2 hash alike")
	}
}

// TestVerifyCallerFormats: a chain mixing entries written before callers
// were recorded (format 1) and after (format 2) verifies; adding a caller
// to an old entry, removing one from a new entry, changing the caller or
// the format, or an unknown format breaks it at that entry.
func TestVerifyCallerFormats(t *testing.T) {
	mixed := func() []*managerv1.AuditLogEntry {
		var out []*managerv1.AuditLogEntry
		prev := ""
		for seq := int64(1); seq <= 4; seq++ {
			e := &managerv1.AuditLogEntry{Seq: seq, TimestampMs: float64(1000 * seq), Source: "api", Kind: "k", Payload: "p", PrevHash: prev}
			if seq > 2 {
				e.Source, e.Caller, e.CallerTokenId, e.HashVersion = "external/x", "token:ops/abc", "abc", auditchain.VersionCaller
			}
			e.Hash = auditchain.EntryHash(e)
			out = append(out, e)
			prev = e.GetHash()
		}
		return out
	}
	if err := auditchain.Verify(nil, mixed()); err != nil {
		t.Fatalf("a chain of both formats: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(c []*managerv1.AuditLogEntry)
		broken int64
		reason string
	}{
		{"caller added to an old entry", func(c []*managerv1.AuditLogEntry) { c[1].Caller = "token:ops/abc" }, 2, "a caller was added"},
		{"token id added to an old entry", func(c []*managerv1.AuditLogEntry) { c[0].CallerTokenId = "abc" }, 1, "a caller was added"},
		{"caller changed", func(c []*managerv1.AuditLogEntry) { c[2].Caller = "automanager" }, 3, "altered"},
		{"token id changed", func(c []*managerv1.AuditLogEntry) { c[3].CallerTokenId = "def" }, 4, "altered"},
		{"caller removed (format 1 claimed)", func(c []*managerv1.AuditLogEntry) {
			c[2].Caller, c[2].CallerTokenId, c[2].HashVersion = "", "", auditchain.VersionNoCaller
		}, 3, "altered"},
		{"format 2 claimed for an old entry", func(c []*managerv1.AuditLogEntry) { c[0].HashVersion = auditchain.VersionCaller }, 1, "altered"},
		{"unknown format", func(c []*managerv1.AuditLogEntry) { c[3].HashVersion = 7 }, 4, "format 7 is unknown"},
		{"source changed", func(c []*managerv1.AuditLogEntry) { c[2].Source = "api" }, 3, "altered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mixed()
			tc.change(c)
			err := auditchain.Verify(nil, c)
			var be *auditchain.BrokenError
			if !errors.As(err, &be) || be.Seq != tc.broken || !strings.Contains(be.Reason, tc.reason) {
				t.Fatalf("Verify = %v, want broken at %d (%s)", err, tc.broken, tc.reason)
			}
		})
	}
}

// TestHashSeparatesFields: fields are length-prefixed, so moving bytes
// from one field to the next changes the hash, and every field counts.
func TestHashSeparatesFields(t *testing.T) {
	base := auditchain.Hash("p", 1, 2, "ab", "c", "d")
	for name, h := range map[string]string{
		"source/kind boundary":  auditchain.Hash("p", 1, 2, "a", "bc", "d"),
		"kind/payload boundary": auditchain.Hash("p", 1, 2, "ab", "", "cd"),
		"prev/source boundary":  auditchain.Hash("pa", 1, 2, "b", "c", "d"),
		"prevHash":              auditchain.Hash("q", 1, 2, "ab", "c", "d"),
		"seq":                   auditchain.Hash("p", 2, 2, "ab", "c", "d"),
		"timestamp":             auditchain.Hash("p", 1, 2.5, "ab", "c", "d"),
		"payload":               auditchain.Hash("p", 1, 2, "ab", "c", "e"),
	} {
		if h == base {
			t.Errorf("%s: same hash", name)
		}
	}
	if len(base) != 64 || strings.ToLower(base) != base {
		t.Errorf("hash %q is not lower-case hex SHA-256", base)
	}
}

func chain(n int, ck *managerv1.AuditCheckpoint) []*managerv1.AuditLogEntry {
	prev, seq := ck.GetHash(), ck.GetSeq()
	var out []*managerv1.AuditLogEntry
	for i := 0; i < n; i++ {
		seq++
		e := &managerv1.AuditLogEntry{Seq: seq, TimestampMs: float64(1000 * seq), Source: "s", Kind: "k", Payload: "p", PrevHash: prev}
		e.Hash = auditchain.EntryHash(e)
		out = append(out, e)
		prev = e.GetHash()
	}
	return out
}

func TestVerify(t *testing.T) {
	ck := &managerv1.AuditCheckpoint{Seq: 10, Hash: strings.Repeat("ab", 32)}
	cases := []struct {
		name    string
		ck      *managerv1.AuditCheckpoint
		entries func() []*managerv1.AuditLogEntry
		broken  int64 // 0 = verifies
	}{
		{"empty", nil, func() []*managerv1.AuditLogEntry { return nil }, 0},
		{"whole chain", nil, func() []*managerv1.AuditLogEntry { return chain(5, nil) }, 0},
		{"after a checkpoint", ck, func() []*managerv1.AuditLogEntry { return chain(3, ck) }, 0},
		{"checkpoint missing", nil, func() []*managerv1.AuditLogEntry { return chain(3, ck) }, 11},
		{"altered payload", nil, func() []*managerv1.AuditLogEntry {
			c := chain(5, nil)
			c[2].Payload = "x"
			return c
		}, 3},
		{"re-hashed after altering", nil, func() []*managerv1.AuditLogEntry {
			c := chain(5, nil)
			c[2].Payload = "x"
			c[2].Hash = auditchain.EntryHash(c[2])
			return c
		}, 4},
		{"entry removed", nil, func() []*managerv1.AuditLogEntry {
			c := chain(5, nil)
			return append(c[:1], c[2:]...)
		}, 3},
		{"entries swapped", nil, func() []*managerv1.AuditLogEntry {
			c := chain(5, nil)
			c[1], c[2] = c[2], c[1]
			return c
		}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := auditchain.Verify(tc.ck, tc.entries())
			if tc.broken == 0 {
				if err != nil {
					t.Fatalf("Verify = %v", err)
				}
				return
			}
			var be *auditchain.BrokenError
			if !errors.As(err, &be) || be.Seq != tc.broken {
				t.Fatalf("Verify = %v, want broken at %d", err, tc.broken)
			}
		})
	}
}
