// Package auditchain is the audit log's hash chain: how an entry's hash is
// computed and how a run of entries is verified. The Manager's FSM chains
// entries with it, the Manager verifies its chain at boot with it, and
// clients (norsk-ctl audit verify, the SDK) re-check a chain they fetched
// with it — so a client need not trust the Manager's own verdict.
//
// An entry's hash is the lower-case hex SHA-256 of
//
//	"norsk-audit-v1\x00" ‖ lp(prevHash) ‖ be64(seq) ‖ be64(float64bits(timestampMs)) ‖ lp(source) ‖ lp(kind) ‖ lp(payload)
//
// where lp(s) is be64(len(s)) ‖ s. The first entry of a chain has prevHash
// "" (or, after a prune, the checkpoint's hash). Seqs increase by one.
//
// That is hash format 1 (stored as hash_version 0). An entry that records
// its caller (hash_version 2) hashes the caller fields too:
//
//	"norsk-audit-v2\x00" ‖ lp(prevHash) ‖ be64(seq) ‖ be64(float64bits(timestampMs)) ‖ lp(source) ‖ lp(kind) ‖ lp(payload) ‖ lp(caller) ‖ lp(callerTokenId)
//
// A format-1 entry must carry no caller (its hash would not cover it), so a
// caller can be neither added to nor removed from an entry without breaking
// the chain. Entries of both formats chain alike.
package auditchain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Hash formats (an entry's hash_version).
const (
	// VersionNoCaller is the format of entries without a caller (format 1,
	// stored as hash_version 0: every entry written before callers were
	// recorded).
	VersionNoCaller = 0
	// VersionCaller hashes the caller fields too.
	VersionCaller = 2
)

const (
	domainV1 = "norsk-audit-v1\x00"
	domainV2 = "norsk-audit-v2\x00"
)

// Hash computes a format-1 entry's hash (an entry without a caller) from
// the previous hash and its fields.
func Hash(prevHash string, seq int64, timestampMs float64, source, kind, payload string) string {
	return hash(domainV1, prevHash, seq, timestampMs, source, kind, payload)
}

// HashWithCaller computes a format-2 entry's hash: its fields and the
// caller that wrote it.
func HashWithCaller(prevHash string, seq int64, timestampMs float64, source, kind, payload, caller, callerTokenID string) string {
	return hash(domainV2, prevHash, seq, timestampMs, source, kind, payload, caller, callerTokenID)
}

func hash(domain, prevHash string, seq int64, timestampMs float64, source string, rest ...string) string {
	h := sha256.New()
	var b [8]byte
	lp := func(s string) {
		binary.BigEndian.PutUint64(b[:], uint64(len(s)))
		h.Write(b[:])
		h.Write([]byte(s))
	}
	h.Write([]byte(domain))
	lp(prevHash)
	binary.BigEndian.PutUint64(b[:], uint64(seq))
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], math.Float64bits(timestampMs))
	h.Write(b[:])
	lp(source)
	for _, s := range rest {
		lp(s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// EntryHash is the hash of an entry's own fields (its prev_hash included)
// in the format its hash_version names; "" for a format it does not know.
func EntryHash(e *managerv1.AuditLogEntry) string {
	switch e.GetHashVersion() {
	case VersionNoCaller:
		return Hash(e.GetPrevHash(), e.GetSeq(), e.GetTimestampMs(), e.GetSource(), e.GetKind(), e.GetPayload())
	case VersionCaller:
		return HashWithCaller(e.GetPrevHash(), e.GetSeq(), e.GetTimestampMs(), e.GetSource(), e.GetKind(), e.GetPayload(), e.GetCaller(), e.GetCallerTokenId())
	}
	return ""
}

// check says what is wrong with one entry's own hash ("" if nothing).
func check(e *managerv1.AuditLogEntry) string {
	switch v := e.GetHashVersion(); {
	case v != VersionNoCaller && v != VersionCaller:
		return fmt.Sprintf("hash format %d is unknown to this verifier (upgrade it)", v)
	case v != VersionCaller && (e.GetCaller() != "" || e.GetCallerTokenId() != ""):
		return fmt.Sprintf("it names a caller its hash format (%d) does not cover (a caller was added)", v)
	case EntryHash(e) != e.GetHash():
		return fmt.Sprintf("its hash %s does not match its contents (it was altered)", short(e.GetHash()))
	}
	return ""
}

// BrokenError names the first entry at which a chain does not verify.
type BrokenError struct {
	Seq    int64
	Reason string
}

func (e *BrokenError) Error() string {
	return fmt.Sprintf("audit chain broken at entry %d: %s", e.Seq, e.Reason)
}

// Verify checks a run of entries, oldest first: each entry's hash is its
// own, each links to the one before (the first to the checkpoint's hash, or
// to "" with no checkpoint), and seqs follow one another (the first right
// after the checkpoint's seq, or 1 without one). It returns a *BrokenError
// naming the first entry that fails, or nil.
func Verify(checkpoint *managerv1.AuditCheckpoint, oldestFirst []*managerv1.AuditLogEntry) error {
	prevHash := checkpoint.GetHash()
	prevSeq := checkpoint.GetSeq()
	for _, e := range oldestFirst {
		switch {
		case e.GetSeq() != prevSeq+1:
			return &BrokenError{Seq: e.GetSeq(), Reason: fmt.Sprintf("seq follows %d (an entry is missing or out of place)", prevSeq)}
		case e.GetPrevHash() != prevHash:
			return &BrokenError{Seq: e.GetSeq(), Reason: fmt.Sprintf("prevHash %s does not link to the previous hash %s", short(e.GetPrevHash()), short(prevHash))}
		}
		if reason := check(e); reason != "" {
			return &BrokenError{Seq: e.GetSeq(), Reason: reason}
		}
		prevHash, prevSeq = e.GetHash(), e.GetSeq()
	}
	return nil
}

func short(h string) string {
	if h == "" {
		return `""`
	}
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}
