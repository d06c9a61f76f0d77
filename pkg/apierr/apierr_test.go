package apierr_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// TestQuote: short values are quoted whole; long ones are cut at a rune
// boundary with their length, so an error never echoes a value back whole.
func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"a\x00b", `"a\x00b"`},
		{strings.Repeat("a", apierr.MaxQuoted), `"` + strings.Repeat("a", apierr.MaxQuoted) + `"`},
		{strings.Repeat("a", apierr.MaxQuoted+1), `"` + strings.Repeat("a", apierr.MaxQuoted) + `"… (65 bytes)`},
		{strings.Repeat("é", 1<<19), `"` + strings.Repeat("é", apierr.MaxQuoted/2) + `"… (1048576 bytes)`},
		{"a" + strings.Repeat("é", 40), `"a` + strings.Repeat("é", 31) + `"… (81 bytes)`},
	} {
		got := apierr.Quote(tc.in)
		if got != tc.want {
			t.Errorf("Quote(%.20q…) = %s, want %s", tc.in, got, tc.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("Quote(%.20q…) is not valid UTF-8", tc.in)
		}
	}
}

// TestGRPCCode: every code is answered with the gRPC status of its own name,
// and a code the table does not know is INTERNAL.
func TestGRPCCode(t *testing.T) {
	for c := apierr.Internal; c <= apierr.DataLoss; c++ {
		got := connect.Code(c.GRPCCode())
		if name := strings.ToUpper(got.String()); name != c.String() {
			t.Errorf("%s answers as %s", c, name)
		}
		if apierr.ParseCode(c.String()) != c {
			t.Errorf("ParseCode(%s) is not %s", c, c)
		}
	}
	if got := apierr.Code(99).GRPCCode(); connect.Code(got) != connect.CodeInternal {
		t.Errorf("an unknown code answers as %d, want INTERNAL", got)
	}
}
