package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/pkg/snapshotfile"
)

// NewOperatorCommand is the operator group: tasks on the Manager's data as
// a whole.
func NewOperatorCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("operator", "Operator tasks on the Manager's data: snapshots")
	snap := cmdutil.NewGroup("snapshot", "Save a snapshot of the Manager's whole state, and inspect snapshot files")
	snap.Long = `A snapshot is one file holding the Manager's whole state at one store index:
jobs, instances, nodes, the audit log and the key/value store, framed and
check-summed (CRC-32C) as the store writes its own snapshots and backups.

To restore one, stop the Manager member and, on its machine, run
  norsk-manager snapshot restore --data-dir D <file>
then start the member again.`
	snap.AddCommand(newSnapshotSaveCommand(g), newSnapshotInspectCommand(g))
	cmd.AddCommand(snap)
	return cmd
}

// SnapshotSummary is what inspect prints, and save in part.
type SnapshotSummary struct {
	File          string         `json:"file"`
	Bytes         string         `json:"bytes"` // decimal strings, as protojson writes 64-bit numbers
	Index         string         `json:"index"`
	SchemaVersion uint32         `json:"schemaVersion"`
	Records       int            `json:"records"`
	Counts        map[string]int `json:"counts"`

	// For the tables: the same as numbers, the labels of Counts in table
	// order, and the audit chain's state.
	index uint64
	size  int64
	order []string
	audit *storev1.AuditState
}

// recordLabels name the snapshot's record types, in the order tables list
// them; the first six are always listed.
var recordLabels = []struct{ field, label string }{
	{"job", "jobs"},
	{"instance", "instances"},
	{"node", "nodes"},
	{"audit_entry", "audit entries"},
	{"kv", "KV keys"},
	{"kv_namespace", "KV namespaces"},
	{"audit_state", "audit chain state"},
	{"store_meta", "store meta"},
}

// readSnapshot reads a whole snapshot from r, checking its framing and its
// trailer. Errors: a DATA_LOSS error for a snapshot that fails its checksum,
// an INVALID_ARGUMENT one for data that is not a (complete) snapshot.
func readSnapshot(name string, r io.Reader) (SnapshotSummary, error) {
	s := SnapshotSummary{File: name, Counts: map[string]int{}}
	sr := snapshotfile.NewReader(r)
	for {
		rec, err := sr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return s, snapshotError(name, err)
		}
		s.Records++
		if oo := rec.ProtoReflect().Descriptor().Oneofs().ByName("record"); oo != nil {
			if fd := rec.ProtoReflect().WhichOneof(oo); fd != nil {
				label := string(fd.Name())
				for _, l := range recordLabels {
					if l.field == label {
						label = l.label
					}
				}
				s.Counts[label]++
			}
		}
		if st := rec.GetAuditState(); st != nil {
			s.audit = st
		}
	}
	h := sr.Header()
	s.index, s.SchemaVersion = h.GetIndex(), h.GetSchemaVersion()
	s.Index = strconv.FormatUint(s.index, 10)
	for i, l := range recordLabels {
		if i < 6 || s.Counts[l.label] > 0 {
			s.order = append(s.order, l.label)
			s.Counts[l.label] = s.Counts[l.label] // listed even when 0
		}
	}
	return s, nil
}

// snapshotError names what is wrong with a snapshot in the API's terms.
func snapshotError(name string, err error) error {
	switch {
	case errors.Is(err, snapshotfile.ErrChecksum):
		return fmt.Errorf("DATA_LOSS: %s is damaged: %w", name, err)
	case errors.Is(err, snapshotfile.ErrCorrupt):
		return fmt.Errorf("INVALID_ARGUMENT: %s is not a valid snapshot file: %w", name, err)
	}
	return fmt.Errorf("read %s: %w", name, err)
}

func (s SnapshotSummary) table(w io.Writer) {
	fmt.Fprintf(w, "File:\t%s\n", s.File)
	fmt.Fprintf(w, "Size:\t%s (%d bytes)\n", cmdutil.BytesIEC(uint64(s.size)), s.size)
	fmt.Fprintf(w, "Index:\t%d\n", s.index)
	fmt.Fprintf(w, "Schema version:\t%d\n", s.SchemaVersion)
	fmt.Fprintf(w, "Records:\t%d (checksum OK)\n", s.Records)
	if a := s.audit; a != nil && a.GetNextSeq() > 1 {
		c := "never pruned"
		if a.GetCheckpoint() != nil {
			c = fmt.Sprintf("checkpoint seq %d", a.GetCheckpoint().GetSeq())
		}
		fmt.Fprintf(w, "Audit chain:\tnext seq %d, %s\n", a.GetNextSeq(), c)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "RECORDS\tCOUNT")
	for _, l := range s.order {
		fmt.Fprintf(w, "%s\t%d\n", l, s.Counts[l])
	}
}

func newSnapshotInspectCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect FILE",
		Short: "Check a snapshot file and count what it holds",
		Long: `Read a snapshot file through, checking its framing and its checksum, and print
its index and schema version and how many records of each kind it holds (jobs,
instances, nodes, audit entries, KV keys and namespaces). A file that fails
its checksum exits 1 with DATA_LOSS and the reason; a file that is not a
snapshot (or is cut short) exits 1 with INVALID_ARGUMENT. Needs no Manager.`,
		Args: cmdutil.ExactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			s, err := readSnapshot(args[0], f)
			if err != nil {
				return err
			}
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			s.size = fi.Size()
			s.Bytes = strconv.FormatInt(s.size, 10)
			return g.Printer().Print(cmdutil.Result{Data: s, Table: s.table})
		},
	}
}

func newSnapshotSaveCommand(g *cmdutil.Globals) *cobra.Command {
	var force bool
	var streamTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "save FILE [--force]",
		Short: "Save a consistent snapshot of the Manager's whole state to a file",
		Long: `Stream a consistent snapshot of the Manager's whole state into FILE. The data
goes to a temporary file beside FILE, which is synced, read back and checked
(framing and checksum) and only then renamed to FILE, so FILE is never a
partial snapshot. Prints the bytes written and the snapshot's store index.
An existing FILE is replaced only with --force. FILE's directory is created
(mode 0700: a snapshot holds every secret of the store) when it is missing.

To restore a snapshot, stop the Manager member and, on its machine, run
  norsk-manager snapshot restore --data-dir D FILE
then start the member again.`,
		Example: `  norsk-ctl operator snapshot save /backups/manager-$(date +%F).snap
  norsk-ctl operator snapshot inspect /backups/manager-2025-03-01.snap`,
		Args: cmdutil.ExactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if streamTimeout <= 0 {
				return cmdutil.UsageErrorf("--stream-timeout must be positive")
			}
			file := args[0]
			if _, err := os.Stat(file); err == nil && !force {
				return fmt.Errorf("%s exists (--force replaces it)", file)
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			// Like kubectl cp and etcdctl snapshot save, a missing directory
			// is made (0700: a snapshot holds every secret of the store).
			if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
				return fmt.Errorf("create the snapshot's directory: %w", err)
			}
			tmp, err := atomicfile.Create(file, 0o600)
			if err != nil {
				return fmt.Errorf("create the snapshot file: %w", err)
			}
			defer tmp.Abort()
			ctx, cancel := context.WithTimeout(cmd.Context(), streamTimeout)
			defer cancel()
			n, err := m.SnapshotSave(ctx, tmp)
			if err != nil {
				return fmt.Errorf("save a snapshot: %w", err)
			}
			if _, err := tmp.Seek(0, io.SeekStart); err != nil {
				return err
			}
			s, err := readSnapshot(file, tmp)
			if err != nil {
				return fmt.Errorf("the Manager's snapshot does not verify (nothing was written to %s): %w", file, err)
			}
			if err := tmp.Commit(); err != nil {
				return fmt.Errorf("put the snapshot in place: %w", err)
			}
			s.size, s.Bytes = n, strconv.FormatInt(n, 10)
			return g.Printer().Print(cmdutil.Result{Data: s, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Saved a snapshot at index %d (schema version %d, %d records) to %s: %d bytes\n", s.index, s.SchemaVersion, s.Records, file, n)
			}})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace FILE if it exists")
	cmd.Flags().DurationVar(&streamTimeout, "stream-timeout", 30*time.Minute, "how long the whole transfer may take")
	return cmd
}
