package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// idKind is a kind of object the CLI takes an id of: jobs, nodes, bundles,
// cluster slots, API tokens and migrations. resolveID turns what the
// operator typed into the id it names: the id itself, or a unique prefix of
// one (as git, docker and nomad take, and as the CLI prints a migration's
// 8-hex short id).
type idKind struct {
	// noun names the kind in errors ("job", "node").
	noun string
	// list returns every id of the kind.
	list func(ctx context.Context, m *norsk.Manager) ([]string, error)
}

var (
	jobIDs = &idKind{
		noun: "job",
		list: func(ctx context.Context, m *norsk.Manager) ([]string, error) {
			jobs, err := m.JobSearch(ctx, norsk.JobSearchSettings{})
			ids := make([]string, 0, len(jobs))
			for _, j := range jobs {
				ids = append(ids, j.GetJob().GetJobId())
			}
			return ids, err
		},
	}
	nodeIDs = &idKind{
		noun: "node",
		list: func(ctx context.Context, m *norsk.Manager) ([]string, error) {
			nodes, err := m.ListNodes(ctx)
			ids := make([]string, 0, len(nodes))
			for _, n := range nodes {
				ids = append(ids, n.GetNodeId())
			}
			return ids, err
		},
	}
	bundleIDs = &idKind{
		noun: "bundle",
		list: func(ctx context.Context, m *norsk.Manager) ([]string, error) {
			list, err := m.ListBundles(ctx)
			ids := make([]string, 0, len(list))
			for _, bw := range list {
				ids = append(ids, bw.GetBundle().GetBundleId())
			}
			return ids, err
		},
	}
	slotIDs = &idKind{
		noun: "cluster slot",
		list: func(ctx context.Context, m *norsk.Manager) ([]string, error) {
			slots, err := m.ListClusterNodes(ctx)
			ids := make([]string, 0, len(slots))
			for _, s := range slots {
				ids = append(ids, s.GetNodeId())
			}
			return ids, err
		},
	}
	tokenIDs = &idKind{
		noun: "token",
		list: func(ctx context.Context, m *norsk.Manager) ([]string, error) {
			toks, err := m.ListTokens(ctx)
			ids := make([]string, 0, len(toks))
			for _, t := range toks {
				ids = append(ids, t.GetId())
			}
			return ids, err
		},
	}
	migrationIDs = &idKind{
		noun: "migration",
		list: func(ctx context.Context, m *norsk.Manager) ([]string, error) {
			all, err := m.ListMigrations(ctx, "")
			ids := make([]string, 0, len(all))
			for _, st := range all {
				ids = append(ids, st.GetMigrationId())
			}
			return ids, err
		},
	}
)

// idKinds are the kinds by the noun takesIDs names them with.
var idKinds = map[string]*idKind{
	"job": jobIDs, "node": nodeIDs, "bundle": bundleIDs, "slot": slotIDs,
	"token": tokenIDs, "migration": migrationIDs,
}

// resolveID resolves what the operator typed to an id of kind k: an exact
// id wins; otherwise the one id that begins with it. An ambiguous prefix is
// a usage error naming the candidates. A prefix of nothing is returned as
// typed, for the Manager to answer NOT_FOUND in its own words.
func resolveID(g *Globals, cmd *cobra.Command, k *idKind, typed string) (string, error) {
	if typed == "" {
		return typed, nil
	}
	ids, err := Ask(g, cmd, k.list, "list %ss", k.noun)
	if err != nil {
		return "", err
	}
	id, err := uniquePrefix(k.noun, typed, ids)
	if errors.Is(err, errNoMatch) {
		return typed, nil
	}
	return id, err
}

var errNoMatch = errors.New("no match")

// uniquePrefix picks the id typed names among ids: typed itself when it is
// one (an exact id wins even when it begins others), else the one id that
// begins with it.
func uniquePrefix(noun, typed string, ids []string) (string, error) {
	if slices.Contains(ids, typed) {
		return typed, nil
	}
	var match []string
	for _, id := range ids {
		if strings.HasPrefix(id, typed) {
			match = append(match, id)
		}
	}
	switch len(match) {
	case 0:
		return "", errNoMatch
	case 1:
		return match[0], nil
	}
	slices.Sort(match)
	return "", UsageErrorf("%s %q is ambiguous: it begins %s", noun, typed, strings.Join(match, ", "))
}

// Annotations that say which arguments and flags of a command are ids.
const (
	idArgsAnnotation  = "norsk-ctl/id-args"
	idFlagsAnnotation = "norsk-ctl/id-flags"
)

// TakesIDs is the Annotations of a command whose positional arguments begin
// with ids: nouns[i] is the kind of the i-th ("" = not an id), a key of
// idKinds. Flags that hold ids are added with withIDFlags.
func TakesIDs(nouns ...string) map[string]string {
	return map[string]string{idArgsAnnotation: strings.Join(nouns, ",")}
}

// WithIDFlags adds to a command's annotations flags that hold ids:
// "flag=noun" each (e.g. "to=node").
func WithIDFlags(a map[string]string, flags ...string) map[string]string {
	if a == nil {
		a = map[string]string{}
	}
	a[idFlagsAnnotation] = strings.Join(flags, ",")
	return a
}

// ResolvePrefixes makes every command under root that takes ids (takesIDs)
// accept unique prefixes of them: when the command fails with NOT_FOUND, the
// ids it was given are resolved (resolveID) and, if one was a prefix, the
// command runs again with the full ids. An exact id thus costs nothing
// more, and usage errors come first as always. An ambiguous prefix is a
// usage error listing the candidates; a prefix of nothing leaves the
// Manager's NOT_FOUND as the answer.
func ResolvePrefixes(g *Globals, root *cobra.Command) {
	for _, c := range root.Commands() {
		ResolvePrefixes(g, c)
	}
	if root.RunE == nil || (root.Annotations[idArgsAnnotation] == "" && root.Annotations[idFlagsAnnotation] == "") {
		return
	}
	run := root.RunE
	root.RunE = func(cmd *cobra.Command, args []string) error {
		err := run(cmd, args)
		if err == nil || !errors.Is(err, norsk.ErrNotFound) {
			return err
		}
		changed, rerr := ResolveIDs(g, cmd, args)
		if rerr != nil {
			return rerr
		}
		if !changed {
			return err
		}
		return run(cmd, args)
	}
}

// ResolveIDs resolves cmd's id arguments (in place) and id flags; it
// reports whether one changed.
func ResolveIDs(g *Globals, cmd *cobra.Command, args []string) (bool, error) {
	changed := false
	for i, noun := range strings.Split(cmd.Annotations[idArgsAnnotation], ",") {
		if noun == "" || i >= len(args) {
			continue
		}
		id, err := resolveID(g, cmd, idKinds[noun], args[i])
		if err != nil {
			return false, err
		}
		changed = changed || id != args[i]
		args[i] = id
	}
	for _, spec := range strings.Split(cmd.Annotations[idFlagsAnnotation], ",") {
		name, noun, ok := strings.Cut(spec, "=")
		fl := cmd.Flags().Lookup(name)
		if !ok || fl == nil || !fl.Changed {
			continue
		}
		typed := fl.Value.String()
		id, err := resolveID(g, cmd, idKinds[noun], typed)
		if err != nil {
			return false, fmt.Errorf("--%s: %w", name, err)
		}
		if id != typed {
			if err := fl.Value.Set(id); err != nil {
				return false, fmt.Errorf("--%s: %w", name, err)
			}
			changed = true
		}
	}
	return changed, nil
}

// ResolveMigrationArg replaces args[0] with the migration it names (see
// resolveID); migration commands resolve first, as their short ids are
// what the CLI prints.
func ResolveMigrationArg(g *Globals, cmd *cobra.Command, args []string) error {
	id, err := resolveID(g, cmd, migrationIDs, args[0])
	if err != nil {
		return err
	}
	args[0] = id
	return nil
}
