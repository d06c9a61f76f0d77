package norsk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/auditchain"
)

// Paging limits of GetAuditLog (the Manager's).
const (
	// DefaultAuditPage is how many entries a page holds when
	// AuditLogQuery.Limit is 0.
	DefaultAuditPage = 100
	// MaxAuditPage is the largest AuditLogQuery.Limit the Manager accepts.
	MaxAuditPage = 1000
)

// AppendAuditEntry appends a caller-supplied entry to the Manager's durable,
// hash-chained audit log — for actions of the caller's own that pass through
// no other call. source is the caller's sub-source: the Manager stores the
// entry under "external/<source>" (at most 119 bytes; "external/" given is
// not repeated) and records the caller's identity (token name and id) in
// the entry, so it never passes for one the Manager wrote. kind must be
// non-empty (at most 128 bytes); payload is opaque text (at most 64 KiB;
// JSON by convention) and is hashed as given. The Manager assigns the seq
// and time and chains the entry; the entry as stored is returned. Errors:
// ErrInvalidArgument (an empty or oversized field), ErrUnavailable (no
// primary).
func (m *Manager) AppendAuditEntry(ctx context.Context, source, kind, payload string) (*AuditLogEntry, error) {
	const op = "AppendAuditEntry"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.AppendAuditEntry(ctx, connect.NewRequest(&managerv1.AppendAuditEntryRequest{Source: source, Kind: kind, Payload: payload}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg.GetEntry(), nil
}

// AuditLogQuery selects a page of GetAuditLog. Every filter given must
// match.
type AuditLogQuery struct {
	// Limit is the most entries the page holds: 0 = DefaultAuditPage, at
	// most MaxAuditPage.
	Limit int
	// BeforeSeq pages on: only entries with a smaller seq (0 = from the
	// newest). Pass the previous page's NextBeforeSeq.
	BeforeSeq int64
	// Source and Kind match exactly ("" = any). The Manager's record of an
	// API call has source "api" and the method as its kind (e.g. "KvCommit").
	Source, Kind string
	// From and To bound the entries' time, inclusive (zero = open).
	From, To time.Time
}

// GetAuditLog returns one page of the audit log, newest first, with whether
// the Manager's hash chain verified when it last booted (and, if not, what
// broke), the checkpoint the retained chain starts from and the bounds of the
// retained seqs. Page on with q.BeforeSeq = page.NextBeforeSeq until it is 0.
// Errors: ErrInvalidArgument (Limit over MaxAuditPage or negative, To before
// From, a time before 1970).
func (m *Manager) GetAuditLog(ctx context.Context, q AuditLogQuery) (*AuditLogPage, error) {
	const op = "GetAuditLog"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	req, err := q.request(op)
	if err != nil {
		return nil, err
	}
	res, err := m.client.GetAuditLog(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

func (q AuditLogQuery) request(op string) (*managerv1.GetAuditLogRequest, error) {
	invalid := func(format string, args ...any) error {
		return &Error{Op: op, Code: connect.CodeInvalidArgument, Message: fmt.Sprintf(format, args...)}
	}
	if q.Limit < 0 || q.Limit > MaxAuditPage {
		return nil, invalid("limit: %d is out of range (0 = the default, at most %d)", q.Limit, MaxAuditPage)
	}
	from, err := epochMs(q.From)
	if err != nil {
		return nil, invalid("from: %v", err)
	}
	to, err := epochMs(q.To)
	if err != nil {
		return nil, invalid("to: %v", err)
	}
	return &managerv1.GetAuditLogRequest{
		Limit: uint32(q.Limit), BeforeSeq: q.BeforeSeq, Source: q.Source, Kind: q.Kind, FromMs: from, ToMs: to,
	}, nil
}

// epochMs is t in milliseconds since the epoch as the API writes times (0
// for the zero time); times before the epoch are refused.
func epochMs(t time.Time) (float64, error) {
	if t.IsZero() {
		return 0, nil
	}
	if t.Before(time.Unix(0, 0)) {
		return 0, fmt.Errorf("%s is before 1970", t.Format(time.RFC3339))
	}
	return float64(t.UnixNano()) / 1e6, nil
}

// AuditTime converts an audit entry's or checkpoint's TimestampMs to a time.
func AuditTime(timestampMs float64) time.Time {
	return time.Unix(0, int64(timestampMs*1e6)).UTC()
}

// PruneAuditLog removes the audit entries strictly older than before (the
// zero time = every entry). The Manager front-prunes, so the kept entries stay
// one unbroken run; records a checkpoint (the seq and hash of the last entry
// removed) so that the kept chain still verifies; and appends an
// "audit-pruned" entry saying who pruned what. It returns how many entries
// were removed and the checkpoint's seq (the previous checkpoint when nothing
// was removed; 0 when nothing was ever pruned). Errors: ErrInvalidArgument
// (before is in the future or before 1970), ErrUnavailable.
func (m *Manager) PruneAuditLog(ctx context.Context, before time.Time) (removed, checkpointSeq int64, err error) {
	const op = "PruneAuditLog"
	if err := m.alive(op); err != nil {
		return 0, 0, err
	}
	ms, err := epochMs(before)
	if err != nil {
		return 0, 0, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: "before: " + err.Error()}
	}
	res, err := m.client.PruneAuditLog(ctx, connect.NewRequest(&managerv1.PruneAuditLogRequest{BeforeTimestampMs: ms}))
	if err != nil {
		return 0, 0, wrapError(op, err)
	}
	return res.Msg.GetRemoved(), res.Msg.GetCheckpointSeq(), nil
}

// AuditVerification is what VerifyAuditLog found.
type AuditVerification struct {
	// Checked is how many entries the client checked (every retained one).
	Checked int
	// Checkpoint is where the retained chain starts (nil when nothing was
	// ever pruned: the chain then starts at seq 1).
	Checkpoint *AuditCheckpoint
	// FirstSeq and LastSeq are the oldest and newest seq checked (0 when
	// the log is empty).
	FirstSeq, LastSeq int64
	// Broken names the first entry that does not verify; nil when the whole
	// chain does.
	Broken *auditchain.BrokenError
	// ChainVerifiedAtBoot and VerificationDetail are the Manager's own
	// verdict on its chain, from when it last booted.
	ChainVerifiedAtBoot bool
	VerificationDetail  string
}

// CheckpointSeq is the seq of the checkpoint the chain was verified from (0
// without one).
func (v AuditVerification) CheckpointSeq() int64 { return v.Checkpoint.GetSeq() }

// VerifyAuditLog fetches every retained audit entry (paging GetAuditLog
// through the whole log) and re-checks the hash chain here, with
// pkg/auditchain, so that the caller need not trust the Manager's own
// verdict: each entry's hash must match its contents, link to the one before
// (the first to the checkpoint) and the seqs must follow one another.
//
// An intact chain returns a nil error. A broken one returns the
// AuditVerification filled in (Broken set) and an *Error with code DataLoss
// (matching ErrDataLoss) that unwraps to the *auditchain.BrokenError naming
// the first entry that fails and why. Entries pruned while the pages are
// being fetched are left out (the chain is checked from the newest
// checkpoint). Errors of the calls are those of GetAuditLog.
func (m *Manager) VerifyAuditLog(ctx context.Context) (AuditVerification, error) {
	const op = "VerifyAuditLog"
	var v AuditVerification
	var newestFirst []*AuditLogEntry
	var before int64
	for first := true; ; first = false {
		page, err := m.GetAuditLog(ctx, AuditLogQuery{Limit: MaxAuditPage, BeforeSeq: before})
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				return v, &Error{Op: op, Code: e.Code, Message: e.Message, cause: err}
			}
			return v, err
		}
		if first {
			v.ChainVerifiedAtBoot, v.VerificationDetail = page.GetChainVerifiedAtBoot(), page.GetVerificationDetail()
		}
		// The last page's checkpoint is the newest: a prune between pages
		// only moves it forward.
		v.Checkpoint = page.GetCheckpoint()
		newestFirst = append(newestFirst, page.GetEntries()...)
		next := page.GetNextBeforeSeq()
		if next == 0 {
			break
		}
		if before != 0 && next >= before {
			return v, &Error{Op: op, Code: connect.CodeInternal, Message: fmt.Sprintf("the Manager's audit log pages do not advance (next before seq %d after %d)", next, before)}
		}
		before = next
	}
	oldestFirst := make([]*AuditLogEntry, 0, len(newestFirst))
	for _, e := range slices.Backward(newestFirst) {
		if e.GetSeq() > v.Checkpoint.GetSeq() {
			oldestFirst = append(oldestFirst, e)
		}
	}
	v.Checked = len(oldestFirst)
	if n := len(oldestFirst); n > 0 {
		v.FirstSeq, v.LastSeq = oldestFirst[0].GetSeq(), oldestFirst[n-1].GetSeq()
	}
	if err := auditchain.Verify(v.Checkpoint, oldestFirst); err != nil {
		var be *auditchain.BrokenError
		if !errors.As(err, &be) {
			be = &auditchain.BrokenError{Reason: err.Error()}
		}
		v.Broken = be
		return v, &Error{Op: op, Code: connect.CodeDataLoss, Message: be.Error(), cause: be}
	}
	return v, nil
}
