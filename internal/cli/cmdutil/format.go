package cmdutil

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Ago says how long before now t was: "just now", "42s ago", "3m ago",
// "5h ago", "2d ago" ("in 3m" for the future, "-" for no time).
func Ago(now time.Time, ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	d := now.Sub(ts.AsTime())
	if d < 0 {
		return "in " + shortDuration(-d)
	}
	if d < time.Second {
		return "just now"
	}
	return shortDuration(d) + " ago"
}

// shortDuration is d in its largest whole unit: 42s, 3m, 5h, 2d.
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// Timestamp is t in RFC 3339 (UTC, seconds), or "-".
func Timestamp(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// EnumWord is an enum value in the short form people type: on-failure.
func EnumWord(e protoreflect.Enum) string {
	d := e.Descriptor()
	v := d.Values().ByNumber(e.Number())
	if v == nil {
		return strconv.Itoa(int(e.Number()))
	}
	var prefix strings.Builder
	for i, r := range string(d.Name()) {
		if i > 0 && r >= 'A' && r <= 'Z' {
			prefix.WriteByte('_')
		}
		prefix.WriteRune(r)
	}
	name := strings.TrimPrefix(string(v.Name()), strings.ToUpper(prefix.String())+"_")
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}

// Tags is "k=v,k2=v2" in key order, or "-".
func Tags(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// Dash is s, or "-" when s is empty (a table's empty cell).
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func protocolWord(p norsk.Protocol) string {
	if p == norsk.ProtocolAny {
		return "tcp"
	}
	return EnumWord(p)
}

// ResolvedPort is "8080→32768/tcp".
func ResolvedPort(m *norsk.ResolvedPortMapping) string {
	return fmt.Sprintf("%d→%d/%s", m.GetTarget(), m.GetPublished(), protocolWord(m.GetProtocol()))
}

// ResolvedPorts lists an instance's published ports by service:
// "web 8080→32768/tcp, rtmp 1935→32769/tcp".
func ResolvedPorts(byService map[string]*norsk.ResolvedPortMappings) string {
	var parts []string
	for _, svc := range slices.Sorted(maps.Keys(byService)) {
		for _, m := range byService[svc].GetMappings() {
			parts = append(parts, svc+" "+ResolvedPort(m))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// SpecPort is a port of a service spec: "80→8080/tcp", "80→6000-6100/udp",
// "80→*/tcp" (ephemeral).
func SpecPort(p *norsk.PortMapping) string {
	host := "*"
	switch h := p.GetHostPort().(type) {
	case *norsk.PortMapping_Specific:
		host = strconv.Itoa(int(h.Specific))
	case *norsk.PortMapping_Range:
		host = fmt.Sprintf("%d-%d", h.Range.GetMinPort(), h.Range.GetMaxPort())
	}
	if p.GetHostAddress() != "" {
		host = p.GetHostAddress() + ":" + host
	}
	return fmt.Sprintf("%d→%s/%s", p.GetContainerPort(), host, protocolWord(p.GetProtocol()))
}

// RestartPolicy is "on-failure (3 in 60s)".
func RestartPolicy(r *norsk.RestartPolicy) string {
	if r == nil || r.GetMode() == norsk.RestartModeUnspecified {
		return "never"
	}
	s := EnumWord(r.GetMode())
	switch {
	case r.GetCount() > 0 && r.GetPeriodS() > 0:
		s += fmt.Sprintf(" (%d in %ds)", r.GetCount(), r.GetPeriodS())
	case r.GetCount() > 0:
		s += fmt.Sprintf(" (%d)", r.GetCount())
	}
	return s
}

// BytesIEC is n in binary units: "15.6 GiB".
func BytesIEC(n uint64) string {
	if n == 0 {
		return "-"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// DurationMs is a millisecond count as a Go duration string, "-" for 0.
func DurationMs(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// HistoryEvent names a history entry's event: created, running, stopping, ….
func HistoryEvent(e *norsk.JobHistoryEntry) string {
	if oo := e.ProtoReflect().Descriptor().Oneofs().ByName("event"); oo != nil {
		if fd := e.ProtoReflect().WhichOneof(oo); fd != nil {
			return string(fd.Name())
		}
	}
	return "-"
}

// HistoryInstance is the instance an entry is about, or nil.
func HistoryInstance(e *norsk.JobHistoryEntry) *norsk.InstanceRef {
	switch {
	case e.GetProvisioned() != nil:
		return e.GetProvisioned().GetInstance()
	case e.GetPrepared() != nil:
		return e.GetPrepared().GetInstance()
	case e.GetRunning() != nil:
		return e.GetRunning().GetInstance()
	case e.GetStopping() != nil:
		return e.GetStopping().GetInstance()
	case e.GetStopped() != nil:
		return e.GetStopped().GetInstance()
	case e.GetNotice() != nil:
		return e.GetNotice().GetInstance()
	}
	return nil
}

// HistoryDetails says what else an entry carries: ports, reasons, hashes.
func HistoryDetails(e *norsk.JobHistoryEntry) string {
	var parts []string
	switch {
	case e.GetUpdated() != nil:
		parts = append(parts, fmt.Sprintf("hash %d → %d", e.GetUpdated().GetPreviousHash(), e.GetUpdated().GetHash()))
	case e.GetProvisioned() != nil:
		p := e.GetProvisioned()
		if p.GetRuntimeRole() != "" && p.GetRuntimeRole() != p.GetInstance().GetRole() {
			parts = append(parts, "runtime role "+p.GetRuntimeRole())
		}
		if p.GetDeferStart() {
			parts = append(parts, "deferred start")
		}
		if p.GetMigrationId() != "" {
			parts = append(parts, "migration "+p.GetMigrationId())
		}
	case e.GetRunning() != nil:
		if ports := ResolvedPorts(e.GetRunning().GetServicePortMappings()); ports != "-" {
			parts = append(parts, ports)
		}
		if e.GetRunning().GetAdopted() {
			parts = append(parts, "adopted")
		}
	case e.GetStopping() != nil:
		parts = append(parts, StoppingReason(e.GetStopping()))
	case e.GetStopped() != nil:
		if codes := e.GetStopped().GetExitCodes(); len(codes) > 0 {
			var cs []string
			for _, svc := range slices.Sorted(maps.Keys(codes)) {
				cs = append(cs, fmt.Sprintf("%s=%d", svc, codes[svc]))
			}
			parts = append(parts, "exit "+strings.Join(cs, ","))
		}
	case e.GetRejected() != nil:
		parts = append(parts, e.GetRejected().GetReason())
	case e.GetNotice() != nil:
		parts = append(parts, e.GetNotice().GetKind()+": "+e.GetNotice().GetMessage())
	}
	if ref := HistoryInstance(e); ref != nil && ref.GetFencingToken() != 0 {
		parts = append(parts, fmt.Sprintf("token %d", ref.GetFencingToken()))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// StoppingReason is "job-failed: exit 1" or "user-requested".
func StoppingReason(s *norsk.InstanceStopping) string {
	r := EnumWord(s.GetReason())
	if s.GetAdditionalReason() != "" {
		r += ": " + s.GetAdditionalReason()
	}
	return r
}

// InstanceWhere is "primary@node-1".
func InstanceWhere(role, node string) string { return role + "@" + node }

// eventKind is the name of an event's kind: job_updated, node_online, ….
func eventKind(ev *norsk.Event) string {
	if oo := ev.ProtoReflect().Descriptor().Oneofs().ByName("kind"); oo != nil {
		if fd := ev.ProtoReflect().WhichOneof(oo); fd != nil {
			return string(fd.Name())
		}
	}
	return "unknown"
}

// EventSubject says what an event is about: the job, node or slot and what
// happened to it.
func EventSubject(ev *norsk.Event) string {
	switch k := ev.GetKind().(type) {
	case *norsk.Event_JobSnapshot:
		j := k.JobSnapshot.GetJob()
		return fmt.Sprintf("job %s %s", j.GetJobId(), EnumWord(j.GetState()))
	case *norsk.Event_NodeSnapshot:
		return nodeSubject(k.NodeSnapshot, "")
	case *norsk.Event_InitialDataComplete:
		s := fmt.Sprintf("snapshot complete at index %d", k.InitialDataComplete.GetIndex())
		if k.InitialDataComplete.GetResync() {
			s += " (resync: replaces what came before)"
		}
		return s
	case *norsk.Event_JobCreated:
		return jobSubject(k.JobCreated)
	case *norsk.Event_JobUpdated:
		return jobSubject(k.JobUpdated)
	case *norsk.Event_JobDeleted:
		return "job " + k.JobDeleted.GetJobId()
	case *norsk.Event_NodeOnline:
		return nodeSubject(k.NodeOnline.GetNode(), k.NodeOnline.GetReason())
	case *norsk.Event_NodeLost:
		return nodeSubject(k.NodeLost.GetNode(), k.NodeLost.GetReason())
	case *norsk.Event_NodeStopping:
		return nodeSubject(k.NodeStopping.GetNode(), k.NodeStopping.GetReason())
	case *norsk.Event_NodeTerminated:
		return nodeSubject(k.NodeTerminated.GetNode(), k.NodeTerminated.GetReason())
	case *norsk.Event_NodeTagsUpdated:
		n := k.NodeTagsUpdated.GetNode()
		return fmt.Sprintf("node %s tags %s", n.GetNodeId(), Tags(n.GetTags()))
	case *norsk.Event_NodeImagesUpdated:
		n := k.NodeImagesUpdated.GetNode()
		return fmt.Sprintf("node %s holds %d image(s) (%s)", n.GetNodeId(), len(n.GetHeldImages()), k.NodeImagesUpdated.GetReason())
	case *norsk.Event_ImagesPrefetched:
		return prefetchSubject(k.ImagesPrefetched)
	case *norsk.Event_ClusterSlotRegistered:
		return slotSubject(k.ClusterSlotRegistered.GetSlot())
	case *norsk.Event_ClusterSlotUpdated:
		return slotSubject(k.ClusterSlotUpdated.GetSlot())
	case *norsk.Event_ClusterSlotDeregistered:
		return slotSubject(k.ClusterSlotDeregistered.GetSlot())
	case *norsk.Event_BundleCreated:
		return "bundle " + k.BundleCreated.GetBundle().GetBundleId() + " " + k.BundleCreated.GetReason()
	case *norsk.Event_BundleUpdated:
		return "bundle " + k.BundleUpdated.GetBundle().GetBundleId() + " " + k.BundleUpdated.GetReason()
	case *norsk.Event_BundleDeleted:
		return "bundle " + k.BundleDeleted.GetBundleId() + " " + k.BundleDeleted.GetReason()
	case *norsk.Event_Placement:
		p := k.Placement
		return fmt.Sprintf("job %s %s on %s (%s: %s)", p.GetJobId(), p.GetRole(), p.GetNodeId(), p.GetKind(), p.GetSummary())
	case *norsk.Event_MigrationUpdated:
		m := k.MigrationUpdated
		s := fmt.Sprintf("migration %s of %s %s (%s → %s)", m.GetMigrationId(), m.GetSourceJobId(), norsk.PhaseName(m.GetPhase()), m.GetSourceNodeId(), cmp.Or(m.GetTargetNodeId(), "?"))
		if m.GetRepair() {
			s += " repair of " + m.GetReason()
		}
		return s
	case *norsk.Event_MigrationForgotten:
		return fmt.Sprintf("%d migration(s) forgotten", len(k.MigrationForgotten.GetMigrationIds()))
	case *norsk.Event_NodeDrainUpdated:
		d := k.NodeDrainUpdated
		return fmt.Sprintf("node %s drain %s: %s", d.GetNodeId(), norsk.DrainStateName(d.GetState()), d.GetSummary())
	}
	if m := norsk.EventMigrationStep(ev); m != nil {
		s := fmt.Sprintf("migration %s: job %s %s on %s", m.GetMigrationId(), m.GetJobKey().GetJobId(), m.GetJobKey().GetRole(), m.GetNodeId())
		if m.GetRefused() != "" {
			s += " refused: " + m.GetRefused()
		}
		if m.GetReason() != "" {
			s += ": " + m.GetReason()
		}
		return s
	}
	return "-"
}

func jobSubject(e *norsk.JobEvent) string {
	s := "job " + e.GetJob().GetJob().GetJobId()
	if entry := e.GetEntry(); entry != nil {
		s += " " + HistoryEvent(entry)
		if ref := HistoryInstance(entry); ref != nil {
			s += " " + InstanceWhere(ref.GetRole(), ref.GetNodeId())
		}
		if d := HistoryDetails(entry); d != "-" {
			s += " (" + d + ")"
		}
	}
	return s
}

func nodeSubject(n *norsk.Node, reason string) string {
	s := fmt.Sprintf("node %s", n.GetNodeId())
	if n.GetNodeName() != "" && n.GetNodeName() != n.GetNodeId() {
		s += " (" + n.GetNodeName() + ")"
	}
	s += " " + EnumWord(n.GetState())
	if reason = cmp.Or(reason, n.GetStateReason()); reason != "" {
		s += ": " + reason
	}
	return s
}

func slotSubject(sl *norsk.ClusterSlot) string {
	s := fmt.Sprintf("slot %s (%s)", sl.GetNodeId(), sl.GetNodeName())
	if sl.GetPool() != "" {
		s += " pool " + sl.GetPool()
	}
	return s
}

// prefetchSubject is an images_prefetched event's line: each ref's outcome.
func prefetchSubject(p *norsk.ImagesPrefetched) string {
	parts := make([]string, 0, len(p.GetResults()))
	for _, r := range p.GetResults() {
		parts = append(parts, r.GetRef()+" "+PrefetchOutcome(r))
	}
	return fmt.Sprintf("node %s prefetch %s: %s", p.GetNodeId(), p.GetRequestId(), strings.Join(parts, "; "))
}

// PrefetchOutcome says what became of one prefetched ref.
func PrefetchOutcome(r *norsk.ImagePrefetchResult) string {
	switch r.GetOutcome() {
	case norsk.ImagePrefetchPulled:
		return fmt.Sprintf("pulled (%s, %s) in %s", ShortDigest(r.GetDigest()), BytesIEC(r.GetSizeBytes()), DurationMs(int64(r.GetDurationMs())))
	case norsk.ImagePrefetchAlreadyPresent:
		return fmt.Sprintf("already present (%s, %s)", ShortDigest(r.GetDigest()), BytesIEC(r.GetSizeBytes()))
	case norsk.ImagePrefetchFailed:
		return "failed: " + r.GetError()
	}
	return EnumWord(r.GetOutcome())
}

// ShortDigest is a digest's algorithm and first 12 hex digits.
func ShortDigest(d string) string {
	if alg, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
		return alg + ":" + hex[:12]
	}
	return Dash(d)
}

// BytesPreview is a value as a table shows it: text shortened to n runes,
// or "(binary, N bytes)".
func BytesPreview(b []byte, n int) string {
	if !Printable(b) {
		return fmt.Sprintf("(binary, %d bytes)", len(b))
	}
	return Truncate(strings.Join(strings.Fields(string(b)), " "), n)
}

// Printable: valid UTF-8 without control characters other than white space.
func Printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	return !bytes.ContainsFunc(b, func(r rune) bool {
		return r < 0x20 && r != '\n' && r != '\t' && r != '\r' || r == 0x7f
	})
}

// FmtDur is a duration for a table: milliseconds below a second, else
// rounded to 10 ms.
func FmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return d.Round(10 * time.Millisecond).String()
}

// Truncate shortens s to n runes, marking the cut with "…".
func Truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// ShortImage is a ref as people write it: without Docker Hub's
// "docker.io/library/" or "docker.io/".
func ShortImage(ref string) string {
	ref = strings.TrimPrefix(ref, "docker.io/library/")
	return strings.TrimPrefix(ref, "docker.io/")
}
