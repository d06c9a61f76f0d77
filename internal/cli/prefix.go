package cli

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// migrationID resolves what the operator typed to a migration id: the id
// itself, or a unique prefix of one (the short id the CLI prints, as git
// and docker take). An ambiguous prefix is a usage error naming the
// candidates; one that matches nothing is the Manager's NOT_FOUND.
func migrationID(g *globals, cmd *cobra.Command, typed string) (string, error) {
	_, err := ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.MigrationState, error) {
		return m.GetMigration(ctx, typed)
	}, "migration %s", typed)
	if err == nil || !errors.Is(err, norsk.ErrNotFound) {
		return typed, err
	}
	all, lerr := ask(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]*norsk.MigrationState, error) {
		return m.ListMigrations(ctx, "")
	}, "list migrations")
	if lerr != nil {
		return "", lerr
	}
	ids := make([]string, 0, len(all))
	for _, st := range all {
		ids = append(ids, st.GetMigrationId())
	}
	id, perr := uniquePrefix("migration", typed, ids)
	if perr != nil {
		if errors.Is(perr, errNoMatch) {
			return "", err // the Manager's own NOT_FOUND
		}
		return "", perr
	}
	return id, nil
}

var errNoMatch = errors.New("no match")

// uniquePrefix picks the one id that starts with typed.
func uniquePrefix(noun, typed string, ids []string) (string, error) {
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
	return "", usageErrorf("%s %q is ambiguous: it begins %s", noun, typed, strings.Join(match, ", "))
}

// resolveMigrationArg replaces args[0] with the migration it names (see migrationID).
func resolveMigrationArg(g *globals, cmd *cobra.Command, args []string) error {
	id, err := migrationID(g, cmd, args[0])
	if err != nil {
		return err
	}
	args[0] = id
	return nil
}
