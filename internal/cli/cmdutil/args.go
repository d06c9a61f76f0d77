package cmdutil

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// NewGroup returns a command that only holds subcommands: without one it
// prints its help, with an unknown one it is a usage error.
func NewGroup(use, short string, aliases ...string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Aliases: aliases, Args: NoSubcommand, RunE: GroupRun}
}

// NoSubcommand accepts a group command without arguments; an argument is an
// unknown subcommand, a usage error suggesting the nearest one.
func NoSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	cmd.SuggestionsMinimumDistance = 2
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return UsageError{errors.New(msg)}
}

// GroupRun is a group command's run: it prints the group's help.
func GroupRun(cmd *cobra.Command, _ []string) error { return cmd.Help() }

// UsageError is a mistake in the command line: Main exits with 2.
type UsageError struct{ err error }

// Error is the message of the mistake.
func (e UsageError) Error() string { return e.err.Error() }

// Unwrap returns the mistake.
func (e UsageError) Unwrap() error { return e.err }

// AsUsageError marks err as a usage error.
func AsUsageError(err error) error { return UsageError{err} }

// UsageErrorf formats a usage error.
func UsageErrorf(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// ExactArgs is cobra.ExactArgs with a usage error that names the arguments.
func ExactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return UsageErrorf("%s takes %d argument(s) (%s), got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// MinArgs requires at least the named arguments.
func MinArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(names) {
			return UsageErrorf("%s needs at least %d argument(s) (%s), got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// OptionalArgs takes at most the named (optional) arguments.
func OptionalArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > len(names) {
			return UsageErrorf("%s takes at most %d argument(s) ([%s]), got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}
