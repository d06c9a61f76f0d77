package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/pkg/auditchain"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewAuditCommand is the audit group: the Manager's hash-chained audit log.
func NewAuditCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("audit", "Read, append to, prune and verify the Manager's audit log")
	cmd.Long = `The Manager's audit log is append-only and hash-chained: every entry's hash
covers the previous entry's hash, so altering or removing an entry breaks the
chain from there on. Every call that changes the Manager's state leaves an
entry (source "api", the method as its kind, and who / method / target as its
payload); other tools add their own with "audit append", stored under source
"external/<their source>". The Manager records the caller of each entry it
writes for a call (the CALLER column; "-" on entries older than callers
being recorded, and on the daemon's own) and hashes it into the chain.`
	cmd.AddCommand(
		newAuditLogCommand(g),
		newAuditAppendCommand(g),
		newAuditPruneCommand(g),
		newAuditVerifyCommand(g),
	)
	return cmd
}

func newAuditLogCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		limit        int
		beforeSeq    int64
		source, kind string
		since, until string
		all          bool
	)
	cmd := &cobra.Command{
		Use:   "log [--limit N] [--source S] [--kind K] [--since WHEN] [--until WHEN] [--all]",
		Short: "Show the audit log, newest first",
		Long: `Show audit entries, newest first: seq, time, source, the caller the
Manager authenticated, kind and the payload (shortened; -o json prints the
entries in full, with their hashes).

--since and --until take a time (RFC 3339, or a day such as 2025-03-01) or a
duration before now (90m, 1h, 2d); both are inclusive. --limit is the page
size; the next (older) page is --before-seq with the seq the output names.
--all pages through every matching entry. The footer says whether the
Manager's hash chain verified when it booted; "audit verify" re-checks the
whole chain here.`,
		Example: `  norsk-ctl audit log
  norsk-ctl audit log --source api --kind KvCommit --since 1h
  norsk-ctl audit log --all -o json > audit.json`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 || limit > norsk.MaxAuditPage {
				return cmdutil.UsageErrorf("--limit must be between 1 and %d (0 = the Manager's default, %d)", norsk.MaxAuditPage, norsk.DefaultAuditPage)
			}
			if beforeSeq < 0 {
				return cmdutil.UsageErrorf("--before-seq must not be negative")
			}
			q := norsk.AuditLogQuery{Limit: limit, BeforeSeq: beforeSeq, Source: source, Kind: kind}
			var err error
			if since != "" {
				if q.From, err = cmdutil.ParseWhen(since, g.Now()); err != nil {
					return cmdutil.UsageErrorf("--since: %v", err)
				}
			}
			if until != "" {
				if q.To, err = cmdutil.ParseWhen(until, g.Now()); err != nil {
					return cmdutil.UsageErrorf("--until: %v", err)
				}
			}
			if all {
				q.Limit = norsk.MaxAuditPage
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			var page *norsk.AuditLogPage
			for {
				ctx, cancel := g.Call(cmd.Context())
				p, err := m.GetAuditLog(ctx, q)
				cancel()
				if err != nil {
					return fmt.Errorf("audit log: %w", err)
				}
				if page == nil {
					page = p
				} else {
					page.Entries = append(page.Entries, p.GetEntries()...)
					page.NextBeforeSeq = p.GetNextBeforeSeq()
				}
				if !all || p.GetNextBeforeSeq() == 0 {
					break
				}
				q.BeforeSeq = p.GetNextBeforeSeq()
			}
			return g.Printer().Print(cmdutil.Result{Data: page, Table: func(w io.Writer) { auditTable(w, page) },
				Wide: func(w io.Writer) { auditWideTable(w, page) }})
		},
	}
	f := cmd.Flags()
	f.IntVar(&limit, "limit", 50, fmt.Sprintf("the most entries to show (at most %d)", norsk.MaxAuditPage))
	f.Int64Var(&beforeSeq, "before-seq", 0, "only entries older than this seq (the next page)")
	f.StringVar(&source, "source", "", `only entries of this source ("api" = the Manager's record of API calls)`)
	f.StringVar(&kind, "kind", "", "only entries of this kind (for source api: the method, e.g. KvCommit)")
	f.StringVar(&since, "since", "", "only entries at or after this time (RFC 3339, or a duration ago: 1h, 2d)")
	f.StringVar(&until, "until", "", "only entries at or before this time")
	f.BoolVar(&all, "all", false, "every matching entry (pages through the whole log)")
	return cmd
}

// auditTime is an audit timestamp as the tables show it.
func auditTime(ms float64) string {
	if ms == 0 {
		return "-"
	}
	return norsk.AuditTime(ms).Format("2006-01-02T15:04:05.000Z")
}

func auditTable(w io.Writer, page *norsk.AuditLogPage) {
	if len(page.GetEntries()) == 0 {
		fmt.Fprintln(w, "No audit entries match.")
	} else {
		fmt.Fprintln(w, "SEQ\tTIME\tSOURCE\tCALLER\tKIND\tPAYLOAD")
		for _, e := range page.GetEntries() {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", e.GetSeq(), auditTime(e.GetTimestampMs()), e.GetSource(), auditCaller(e), e.GetKind(), cmdutil.Truncate(payloadSummary(e.GetPayload()), 120))
		}
	}
	auditFooter(w, page)
}

// auditWideTable adds to auditTable each entry's caller token, its hash
// and the hash it chains to, and the whole payload.
func auditWideTable(w io.Writer, page *norsk.AuditLogPage) {
	if len(page.GetEntries()) == 0 {
		fmt.Fprintln(w, "No audit entries match.")
	} else {
		fmt.Fprintln(w, "SEQ\tTIME\tSOURCE\tCALLER\tTOKEN\tKIND\tHASH\tPREV\tPAYLOAD")
		for _, e := range page.GetEntries() {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.GetSeq(), auditTime(e.GetTimestampMs()), e.GetSource(), auditCaller(e),
				cmdutil.Dash(e.GetCallerTokenId()), e.GetKind(), shortHash(e.GetHash()), shortHash(e.GetPrevHash()), payloadSummary(e.GetPayload()))
		}
	}
	auditFooter(w, page)
}

// auditFooter says whether the chain was verified and what is retained.
func auditFooter(w io.Writer, page *norsk.AuditLogPage) {
	fmt.Fprintln(w)
	if page.GetChainVerifiedAtBoot() {
		fmt.Fprintln(w, "Chain: verified by the Manager at boot")
	} else {
		fmt.Fprintf(w, "Chain: NOT verified by the Manager at boot: %s\n", cmdutil.Dash(page.GetVerificationDetail()))
	}
	fmt.Fprintf(w, "Retained: %s\n", retained(page))
	if next := page.GetNextBeforeSeq(); next != 0 {
		fmt.Fprintf(w, "More: --before-seq %d\n", next)
	}
}

// auditCaller is the caller the Manager recorded for an entry, or "-"
// (an entry written before callers were recorded, or the daemon's own): only
// the hashed caller field, never a name a payload claims.
func auditCaller(e *norsk.AuditLogEntry) string {
	if c := e.GetCaller(); c != "" {
		return cmdutil.Truncate(strings.Join(strings.Fields(c), " "), 60)
	}
	return "-"
}

// retained describes the retained part of the chain.
func retained(page *norsk.AuditLogPage) string {
	s := "no entries"
	if page.GetLastSeq() != 0 {
		s = fmt.Sprintf("seq %d–%d", page.GetFirstSeq(), page.GetLastSeq())
	}
	if c := page.GetCheckpoint(); c != nil {
		s += fmt.Sprintf(", after checkpoint seq %d (pruned up to %s)", c.GetSeq(), auditTime(c.GetTimestampMs()))
	} else {
		s += ", never pruned"
	}
	return s
}

// payloadSummary is a payload on one line: a flat JSON object as key=value
// pairs in its own order ("who=peer:… method=KvCommit target=kv/app"),
// anything else with its line breaks and runs of space collapsed.
func payloadSummary(p string) string {
	if s, ok := flatJSON(p); ok {
		return s
	}
	return strings.Join(strings.Fields(p), " ")
}

func flatJSON(p string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(p))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	var parts []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return "", false
		}
		v, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch x := v.(type) {
		case json.Delim:
			return "", false // nested: show the text
		case nil:
			parts = append(parts, fmt.Sprintf("%v=null", k))
		default:
			parts = append(parts, fmt.Sprintf("%v=%v", k, x))
		}
	}
	if _, err := dec.Token(); err != nil {
		return "", false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", false
	}
	return strings.Join(parts, " "), true
}

func newAuditAppendCommand(g *cmdutil.Globals) *cobra.Command {
	var source, kind, payload, payloadFile string
	cmd := &cobra.Command{
		Use:   "append --source S --kind K [--payload TEXT | --payload-file FILE|-]",
		Short: "Append an entry of your own to the audit log",
		Long: `Append an entry to the audit log, for actions that pass through no other call.
The Manager stores it under source "external/<--source>" (the sources "api"
and "manager" are its own), records your token as its caller, assigns its seq
and time and chains it. The payload is opaque text (JSON by convention), at
most 64 KiB, hashed exactly as given.`,
		Example: `  norsk-ctl audit append --source deploy --kind release --payload '{"version":"1.4.2"}'
  norsk-ctl audit append --source ops --kind note --payload-file - < note.txt`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if source == "" || kind == "" {
				return cmdutil.UsageErrorf("--source and --kind are required")
			}
			if cmd.Flags().Changed("payload") && payloadFile != "" {
				return cmdutil.UsageErrorf("--payload and --payload-file exclude each other")
			}
			if payloadFile != "" {
				data, err := g.ReadInput(payloadFile, "the payload")
				if err != nil {
					return err
				}
				payload = string(data)
			}
			e, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.AuditLogEntry, error) {
				return m.AppendAuditEntry(ctx, source, kind, payload)
			}, "append audit entry")
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: e, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Appended audit entry %d at %s (hash %s)\n", e.GetSeq(), auditTime(e.GetTimestampMs()), shortHash(e.GetHash()))
			}})
		},
	}
	f := cmd.Flags()
	f.StringVar(&source, "source", "", `what the entry comes from (required; stored as "external/<source>")`)
	f.StringVar(&kind, "kind", "", "what kind of entry it is (required)")
	f.StringVar(&payload, "payload", "", "the entry's text")
	f.StringVar(&payloadFile, "payload-file", "", "read the entry's text from FILE (- for stdin)")
	return cmd
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return cmdutil.Dash(h)
}

// Pruned is what audit prune prints in json and yaml.
type Pruned struct {
	Removed       string `json:"removed"`
	CheckpointSeq string `json:"checkpointSeq"`
}

func newAuditPruneCommand(g *cmdutil.Globals) *cobra.Command {
	var before string
	var yes bool
	cmd := &cobra.Command{
		Use:   "prune --before WHEN|0 [--yes]",
		Short: "Remove audit entries older than a time, keeping the rest of the chain verifiable",
		Long: `Remove the audit entries strictly older than --before: a time (RFC 3339, or a
day such as 2025-03-01) or a duration before now (30d, 12h). --before 0 removes
every entry and needs --yes.

The Manager removes from the oldest end only, records a checkpoint (the seq
and hash of the last entry removed) from which the kept chain still verifies,
and appends an "audit-pruned" entry saying who pruned what.`,
		Example: `  norsk-ctl audit prune --before 90d
  norsk-ctl audit prune --before 2025-01-01T00:00:00Z
  norsk-ctl audit prune --before 0 --yes`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var t time.Time
			switch {
			case before == "":
				return cmdutil.UsageErrorf("--before is required (a time, a duration ago, or 0 for every entry)")
			case before == "0":
				if !yes {
					return cmdutil.UsageErrorf("--before 0 removes every audit entry: add --yes to confirm")
				}
			default:
				var err error
				if t, err = cmdutil.ParseWhen(before, g.Now()); err != nil {
					return cmdutil.UsageErrorf("--before: %v", err)
				}
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			removed, ckpt, err := m.PruneAuditLog(ctx, t)
			if err != nil {
				return fmt.Errorf("prune the audit log: %w", err)
			}
			p := Pruned{Removed: strconv.FormatInt(removed, 10), CheckpointSeq: strconv.FormatInt(ckpt, 10)}
			return g.Printer().Print(cmdutil.Result{Data: p, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Pruned %d audit entries; the chain now starts after checkpoint seq %d\n", removed, ckpt)
			}})
		},
	}
	cmd.Flags().StringVar(&before, "before", "", "remove entries older than this (a time, a duration ago, or 0 = every entry)")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm removing every entry (--before 0)")
	return cmd
}

// Verification is what audit verify prints in json and yaml.
type Verification struct {
	Verified            bool   `json:"verified"`
	Checked             int    `json:"checked"`
	CheckpointSeq       string `json:"checkpointSeq"`
	FirstSeq            string `json:"firstSeq"`
	LastSeq             string `json:"lastSeq"`
	BrokenAtSeq         string `json:"brokenAtSeq,omitempty"`
	Reason              string `json:"reason,omitempty"`
	ChainVerifiedAtBoot bool   `json:"chainVerifiedAtBoot"`
	VerificationDetail  string `json:"verificationDetail,omitempty"`
}

func newAuditVerifyCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "verify",
		Short: "Fetch the whole audit log and re-check its hash chain here",
		Long: `Fetch every retained audit entry and re-check the hash chain on this machine,
without trusting the Manager's own verdict: each entry's hash must match its
contents and link to the entry before it (the first to the checkpoint left by
the last prune), and the seqs must follow one another. Prints how many entries
verified and from which checkpoint, and the Manager's own verdict from its last
boot. Exits 1 when the chain is broken, naming the first broken entry and why.
The whole check is bounded by ten times --timeout.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			// The whole log takes a call per thousand entries: the check as a
			// whole is bounded by ten times --timeout.
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*g.Timeout)
			defer cancel()
			v, err := m.VerifyAuditLog(ctx)
			var be *auditchain.BrokenError
			if err != nil && !errors.As(err, &be) {
				return fmt.Errorf("verify the audit log: %w", err)
			}
			out := Verification{
				Verified: be == nil, Checked: v.Checked, CheckpointSeq: strconv.FormatInt(v.CheckpointSeq(), 10),
				FirstSeq: strconv.FormatInt(v.FirstSeq, 10), LastSeq: strconv.FormatInt(v.LastSeq, 10),
				ChainVerifiedAtBoot: v.ChainVerifiedAtBoot, VerificationDetail: v.VerificationDetail,
			}
			if be != nil {
				out.BrokenAtSeq, out.Reason = strconv.FormatInt(be.Seq, 10), be.Reason
			}
			if perr := g.Printer().Print(cmdutil.Result{Data: out, Table: func(w io.Writer) { verifyTable(w, v) }}); perr != nil {
				return perr
			}
			if be != nil {
				return fmt.Errorf("audit chain broken at entry %d: %s", be.Seq, be.Reason)
			}
			return nil
		},
	}
}

func verifyTable(w io.Writer, v norsk.AuditVerification) {
	span := ""
	if v.Checked > 0 {
		span = fmt.Sprintf(" (seq %d–%d)", v.FirstSeq, v.LastSeq)
	}
	ckpt := fmt.Sprintf("checkpoint seq %d", v.CheckpointSeq())
	if v.Checkpoint == nil {
		ckpt += " (never pruned)"
	}
	if v.Broken == nil {
		fmt.Fprintf(w, "Client-side check: verified %d entries from %s%s\n", v.Checked, ckpt, span)
	} else {
		fmt.Fprintf(w, "Client-side check: BROKEN at entry %d: %s (%d entries fetched from %s%s)\n", v.Broken.Seq, v.Broken.Reason, v.Checked, ckpt, span)
	}
	if v.ChainVerifiedAtBoot {
		fmt.Fprintln(w, "Manager's check at boot: verified")
	} else {
		fmt.Fprintf(w, "Manager's check at boot: NOT verified: %s\n", cmdutil.Dash(v.VerificationDetail))
	}
}
