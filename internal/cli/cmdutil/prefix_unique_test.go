package cmdutil

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestUniquePrefix(t *testing.T) {
	t.Parallel()
	ids := []string{"3f2a91c0-aaaa", "3f2b0000-bbbb", "77aa0000-cccc"}
	for _, tc := range []struct{ typed, want, err string }{
		{"77", "77aa0000-cccc", ""},
		{"3f2a91c0", "3f2a91c0-aaaa", ""},
		{"3f2a91c0-aaaa", "3f2a91c0-aaaa", ""},
		{"3f2", "", `migration "3f2" is ambiguous: it begins 3f2a91c0-aaaa, 3f2b0000-bbbb`},
		{"zz", "", "no match"},
	} {
		got, err := uniquePrefix("migration", tc.typed, ids)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("uniquePrefix(%q) = %q, %v; want %q, %q", tc.typed, got, err, tc.want, tc.err)
		}
	}
}

// uniquePrefix's contract over any ids: an id typed whole is itself; else
// the answer is the one id typed begins, an ambiguity naming every id it
// begins, or no match when it begins none.
func TestUniquePrefixProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		ids := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-c]{1,4}`), 0, 8, rapid.ID[string]).Draw(t, "ids")
		typed := rapid.StringMatching(`[a-c]{1,3}`).Draw(t, "typed")
		var begun []string
		for _, id := range ids {
			if strings.HasPrefix(id, typed) {
				begun = append(begun, id)
			}
		}
		got, err := uniquePrefix("job", typed, ids)
		switch {
		case slices.Contains(ids, typed):
			if got != typed || err != nil {
				t.Fatalf("exact %q: %q, %v", typed, got, err)
			}
		case len(begun) == 0:
			if !errors.Is(err, errNoMatch) {
				t.Fatalf("%q begins nothing: %q, %v", typed, got, err)
			}
		case len(begun) == 1:
			if got != begun[0] || err != nil {
				t.Fatalf("%q begins only %q: %q, %v", typed, begun[0], got, err)
			}
		default:
			var ue UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("%q begins %v: %q, %v; want a usage error", typed, begun, got, err)
			}
			for _, id := range begun {
				if !strings.Contains(err.Error(), id) {
					t.Fatalf("the ambiguity %q does not name %q", err, id)
				}
			}
		}
	})
}
