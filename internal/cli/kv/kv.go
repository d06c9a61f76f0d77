package kv

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewKVCommand is the kv group: the Manager's key/value store.
func NewKVCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("kv", "Read and write the Manager's key/value store")
	cmd.Long = `The Manager's key/value store: namespaces of keys, each with a value and a
revision (the store index of its last write). Writes are all or nothing and may
be guarded by the revision the writer read: a mismatch fails with
FAILED_PRECONDITION and changes nothing. Each namespace also has a schema
version, the client's own number, which a commit can check and set.

Limits: namespaces of 1-128 bytes, keys of 1-512 bytes, values of at most
256 KiB, at most 128 writes and 4 MiB of values per commit.`
	cmd.AddCommand(
		newKVGetCommand(g),
		newKVListCommand(g),
		newKVPutCommand(g),
		newKVDeleteCommand(g),
		newKVCommitCommand(g),
	)
	return cmd
}

func newKVGetCommand(g *cmdutil.Globals) *cobra.Command {
	var raw bool
	cmd := &cobra.Command{
		Use:   "get NAMESPACE KEY [--raw]",
		Short: "Print one key's value (exit 1 when the key is absent)",
		Long: `Print the value of a key: text as it is, a binary value base64-encoded (with a
note on stderr). --raw writes the value's exact bytes and nothing else. -o json
prints the entry with its revision and create revision (the value in base64).
An absent key exits 1 with "not found".`,
		Args: cmdutil.ExactArgs("NAMESPACE", "KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.KvEntry, error) {
				return m.KvGet(ctx, args[0], args[1])
			}, "kv get %s %s", args[0], args[1])
			if err != nil {
				return err
			}
			if raw {
				_, err := g.Out.Write(e.GetValue())
				return err
			}
			if !g.Human() {
				return g.Printer().Print(cmdutil.Result{Data: e})
			}
			// The value as it is (tabs in it are the value's, not columns).
			v := e.GetValue()
			if !cmdutil.Printable(v) {
				fmt.Fprintf(g.ErrOut, "(a binary value of %d bytes, shown in base64; --raw prints its bytes)\n", len(v))
				_, err = fmt.Fprintln(g.Out, base64.StdEncoding.EncodeToString(v))
				return err
			}
			if len(v) > 0 && v[len(v)-1] != '\n' {
				v = append(v, '\n')
			}
			_, err = g.Out.Write(v)
			return err
		},
	}
	cmd.Flags().BoolVar(&raw, "raw", false, "write the value's exact bytes (no newline, any -o ignored)")
	return cmd
}

// kvListing is what kv list prints in json and yaml.
type kvListing struct {
	Namespace     string            `json:"namespace"`
	SchemaVersion string            `json:"schemaVersion"`
	Entries       []json.RawMessage `json:"entries"`
}

func newKVListCommand(g *cmdutil.Globals) *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "list NAMESPACE [--prefix P]",
		Short: "List a namespace's keys with their revisions, sizes and a preview of their values",
		Args:  cmdutil.ExactArgs("NAMESPACE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			entries, schema, err := m.KvList(ctx, args[0], prefix)
			if err != nil {
				return fmt.Errorf("kv list %s: %w", args[0], err)
			}
			out := kvListing{Namespace: args[0], SchemaVersion: strconv.FormatInt(schema, 10), Entries: []json.RawMessage{}}
			for _, e := range entries {
				out.Entries = append(out.Entries, cmdutil.ProtoObject(e))
			}
			return g.Printer().Print(cmdutil.Result{Data: out, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Namespace %s: schema version %d, %d keys", args[0], schema, len(entries))
				if prefix != "" {
					fmt.Fprintf(w, " under %q", prefix)
				}
				fmt.Fprintln(w)
				if len(entries) == 0 {
					return
				}
				fmt.Fprintln(w, "KEY\tREVISION\tSIZE\tVALUE")
				for _, e := range entries {
					fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", e.GetKey(), e.GetRevision(), len(e.GetValue()), cmdutil.BytesPreview(e.GetValue(), 60))
				}
			}, Wide: func(w io.Writer) {
				fmt.Fprintf(w, "Namespace %s: schema version %d, %d keys", args[0], schema, len(entries))
				if prefix != "" {
					fmt.Fprintf(w, " under %q", prefix)
				}
				fmt.Fprintln(w)
				if len(entries) == 0 {
					return
				}
				fmt.Fprintln(w, "KEY\tREVISION\tCREATED AT\tSIZE\tVALUE")
				for _, e := range entries {
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\n", e.GetKey(), e.GetRevision(), e.GetCreateRevision(), len(e.GetValue()), cmdutil.BytesPreview(e.GetValue(), 200))
				}
			}})
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "only keys that start with this")
	return cmd
}

// Committed is what the kv write commands print in json and yaml.
type Committed struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key,omitempty"`
	Writes    int    `json:"writes"`
	Revision  string `json:"revision"` // a decimal string, as protojson writes uint64
}

// guardFlags are --if-revision and --if-absent.
type guardFlags struct {
	revision uint64
	absent   bool
}

func (f *guardFlags) add(cmd *cobra.Command, absent bool) {
	cmd.Flags().Uint64Var(&f.revision, "if-revision", 0, "write only if the key is at this revision (0 = only if it does not exist)")
	if absent {
		cmd.Flags().BoolVar(&f.absent, "if-absent", false, "write only if the key does not exist")
	}
}

func (f *guardFlags) apply(cmd *cobra.Command, w norsk.KvWrite) (norsk.KvWrite, error) {
	byRev := cmd.Flags().Changed("if-revision")
	switch {
	case byRev && f.absent:
		return w, cmdutil.UsageErrorf("--if-revision and --if-absent exclude each other")
	case byRev:
		return w.IfRevision(f.revision), nil
	case f.absent:
		return w.IfAbsent(), nil
	}
	return w, nil
}

// commit sends writes and prints the revision.
func commit(g *cmdutil.Globals, cmd *cobra.Command, ns, key string, writes []norsk.KvWrite, opts norsk.KvCommitOptions, what string) error {
	rev, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (uint64, error) { return m.KvCommit(ctx, ns, writes, opts) }, "kv %s", what)
	if err != nil {
		return err
	}
	out := Committed{Namespace: ns, Key: key, Writes: len(writes), Revision: strconv.FormatUint(rev, 10)}
	return g.Printer().Print(cmdutil.Result{Data: out, Table: func(w io.Writer) {
		switch {
		case what == "put":
			fmt.Fprintf(w, "Put %s/%s at revision %d\n", ns, key, rev)
		case what == "delete":
			fmt.Fprintf(w, "Deleted %s/%s at revision %d\n", ns, key, rev)
		default:
			fmt.Fprintf(w, "Committed %d write(s) to %s at revision %d\n", len(writes), ns, rev)
		}
	}})
}

func newKVPutCommand(g *cmdutil.Globals) *cobra.Command {
	var file string
	var guard guardFlags
	cmd := &cobra.Command{
		Use:   "put NAMESPACE KEY VALUE | --file FILE [--if-revision N | --if-absent]",
		Short: "Set one key; prints the new revision",
		Long: `Set a key to VALUE, or to the contents of --file (- for stdin). --if-revision N
writes only if the key is still at revision N (what "kv get -o json" showed);
--if-absent (or --if-revision 0) only if it does not exist. A mismatch exits 1
with FAILED_PRECONDITION and changes nothing.`,
		Example: `  norsk-ctl kv put app config/region eu-west-1
  norsk-ctl kv put app config/ladder --file ladder.json --if-revision 1234
  norsk-ctl kv put app lock/leader me --if-absent`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 3 && file != "" {
				return cmdutil.UsageErrorf("give VALUE or --file, not both")
			}
			if len(args) == 2 && file == "" {
				return cmdutil.UsageErrorf("give the value: VALUE or --file FILE")
			}
			if len(args) == 2 || len(args) == 3 {
				return nil
			}
			return cmdutil.UsageErrorf("%s takes NAMESPACE KEY [VALUE], got %d argument(s)", cmd.CommandPath(), len(args))
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var value []byte
			if len(args) == 3 {
				value = []byte(args[2])
			} else {
				var err error
				if value, err = g.ReadInput(file, "the value"); err != nil {
					return err
				}
			}
			w, err := guard.apply(cmd, norsk.KvPut(args[1], value))
			if err != nil {
				return err
			}
			return commit(g, cmd, args[0], args[1], []norsk.KvWrite{w}, norsk.KvCommitOptions{}, "put")
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "read the value from FILE (- for stdin)")
	guard.add(cmd, true)
	return cmd
}

func newKVDeleteCommand(g *cmdutil.Globals) *cobra.Command {
	var guard guardFlags
	cmd := &cobra.Command{
		Use:   "delete NAMESPACE KEY [--if-revision N]",
		Short: "Delete one key; prints the new revision",
		Long: `Delete a key. Deleting an absent key is not an error, unless --if-revision
names the revision the key must be at.`,
		Args: cmdutil.ExactArgs("NAMESPACE", "KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := guard.apply(cmd, norsk.KvDelete(args[1]))
			if err != nil {
				return err
			}
			return commit(g, cmd, args[0], args[1], []norsk.KvWrite{w}, norsk.KvCommitOptions{}, "delete")
		},
	}
	guard.add(cmd, false)
	return cmd
}

// commitFile is the file of kv commit: the writes and the options.
type commitFile struct {
	Writes                []commitWrite `json:"writes"`
	ExpectedSchemaVersion *int64        `json:"expectedSchemaVersion"`
	SetSchemaVersion      *int64        `json:"setSchemaVersion"`
}

type commitWrite struct {
	Key              string  `json:"key"`
	Put              *string `json:"put"`
	PutBase64        *string `json:"putBase64"`
	Delete           bool    `json:"delete"`
	ExpectedRevision *uint64 `json:"expectedRevision"`
}

// parseCommitFile reads a kv commit file (YAML or JSON): a list of writes,
// or an object with writes and the schema options.
func parseCommitFile(data []byte) ([]norsk.KvWrite, norsk.KvCommitOptions, error) {
	var opts norsk.KvCommitOptions
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, opts, err
	}
	js = bytes.TrimSpace(js)
	var cf commitFile
	decode := func(v any) error {
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		return dec.Decode(v)
	}
	switch {
	case len(js) > 0 && js[0] == '[':
		err = decode(&cf.Writes)
	case len(js) > 0 && js[0] == '{':
		err = decode(&cf)
	default:
		err = errors.New("want a list of writes, or an object with writes (and expectedSchemaVersion, setSchemaVersion)")
	}
	if err != nil {
		return nil, opts, err
	}
	opts = norsk.KvCommitOptions{ExpectSchemaVersion: cf.ExpectedSchemaVersion, SetSchemaVersion: cf.SetSchemaVersion}
	writes := make([]norsk.KvWrite, 0, len(cf.Writes))
	for i, cw := range cf.Writes {
		ops := 0
		for _, set := range []bool{cw.Put != nil, cw.PutBase64 != nil, cw.Delete} {
			if set {
				ops++
			}
		}
		if ops != 1 {
			return nil, opts, fmt.Errorf("writes[%d] (key %q): give exactly one of put, putBase64 and delete: true", i, cw.Key)
		}
		w := norsk.KvWrite{Key: cw.Key, Delete: cw.Delete, ExpectedRevision: cw.ExpectedRevision}
		switch {
		case cw.Put != nil:
			w.Value = []byte(*cw.Put)
		case cw.PutBase64 != nil:
			if w.Value, err = base64.StdEncoding.DecodeString(*cw.PutBase64); err != nil {
				return nil, opts, fmt.Errorf("writes[%d].putBase64: %v", i, err)
			}
		}
		writes = append(writes, w)
	}
	return writes, opts, nil
}

func newKVCommitCommand(g *cmdutil.Globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "commit NAMESPACE -f FILE",
		Short: "Apply several writes at once, all or nothing; prints the new revision",
		Long: `Apply the writes of FILE (YAML or JSON; - for stdin) to a namespace in one
commit: every write applies or none does. FILE is a list of writes, or an
object with the writes and the namespace's schema-version options:

  expectedSchemaVersion: 2     # optional: the namespace must be at 2 (0 = never set)
  setSchemaVersion: 3          # optional: set it in the same commit
  writes:
    - key: config/region
      put: eu-west-1           # a text value
      expectedRevision: 1234   # optional: the key must be at this revision
    - key: config/logo
      putBase64: iVBORw0KGgo=  # a binary value
    - key: lock/leader
      put: me
      expectedRevision: 0      # 0 = the key must not exist
    - key: old/setting
      delete: true

Each write has a key and exactly one of put, putBase64 and delete: true. Any
expectation that does not hold fails the commit with FAILED_PRECONDITION,
naming the write, and nothing changes.`,
		Example: `  norsk-ctl kv commit app -f changes.yaml
  echo '[{key: a, put: "1"}, {key: b, delete: true}]' | norsk-ctl kv commit app -f -`,
		Args: cmdutil.ExactArgs("NAMESPACE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return cmdutil.UsageErrorf("give the writes with -f FILE (- for stdin)")
			}
			data, err := g.ReadInput(file, "the commit")
			if err != nil {
				return err
			}
			writes, opts, err := parseCommitFile(data)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			return commit(g, cmd, args[0], "", writes, opts, "commit")
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the writes, YAML or JSON (- for stdin)")
	return cmd
}
