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
package auditchain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

const domain = "norsk-audit-v1\x00"

// Hash computes an entry's hash from the previous hash and its fields.
func Hash(prevHash string, seq int64, timestampMs float64, source, kind, payload string) string {
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
	lp(kind)
	lp(payload)
	return hex.EncodeToString(h.Sum(nil))
}

// EntryHash is Hash of an entry's own fields (its prev_hash included).
func EntryHash(e *managerv1.AuditLogEntry) string {
	return Hash(e.GetPrevHash(), e.GetSeq(), e.GetTimestampMs(), e.GetSource(), e.GetKind(), e.GetPayload())
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
		case EntryHash(e) != e.GetHash():
			return &BrokenError{Seq: e.GetSeq(), Reason: fmt.Sprintf("its hash %s does not match its contents (it was altered)", short(e.GetHash()))}
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
