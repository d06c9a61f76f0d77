package state

import (
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// The FSM does not validate input (decision 0046): a command was validated
// once, by the handler that proposed it (pkg/jobspec, the bounds table), and
// it applies on every member and on every replay of the log exactly as it did
// when it was committed, whatever the binary's validators say today. The FSM
// refuses only what depends on state: a job that exists, a stale hash, a
// node that is gone, a limit on what the tables would hold after the change.
//
// A rule of the last kind that must change for stored data is keyed to the
// store's schema version, never changed in place: the new rule comes with a
// new SchemaVersion and its MigrateSchema command, so every member switches
// at the same index of the log, and a log replayed from before that index
// applies under the old rule.

// rules are the FSM's own limits on what the tables may hold, as they stand
// at one schema version.
type rules struct {
	// maxNodeTags bounds a node's tags after SetNodeTags merged the new
	// ones into its own.
	maxNodeTags int
}

// rulesAt are the rules in force at each schema version; a version not
// listed has the rules of the newest version below it.
var rulesAt = map[uint32]rules{
	0: {maxNodeTags: jobspec.MaxTags},
}

// rulesFor are the rules in force at schema version v.
func rulesFor(v uint32) rules {
	for ; ; v-- {
		if r, ok := rulesAt[v]; ok {
			return r
		}
	}
}

// rules are the rules in force at the store's schema version.
func (t *tx) rules() rules { return rulesFor(t.read().SchemaVersion()) }

// errNoPayload refuses a command that carries nothing to apply: a proposer's
// bug, never a caller's mistake (handlers check that the field is there).
func errNoPayload(what string) error {
	return apierr.New(apierr.Internal, "the command carries no %s", what)
}

// needKey refuses a command without a value a table is keyed by (go-memdb
// cannot index an empty key). Like errNoPayload it is a proposer's bug, and
// the condition can never change: it is the tables' shape, not a rule on
// input.
func needKey(what, v string) error {
	if v == "" {
		return errNoPayload(what)
	}
	return nil
}
