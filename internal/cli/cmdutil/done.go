package cmdutil

import (
	"fmt"
	"io"
	"strings"
)

// done is what a command without an answer of its own prints.
type done struct {
	Kind   string `json:"kind"`
	ID     string `json:"id"`
	Result string `json:"result"`
}

// PrintDone reports a call that returns nothing.
func (g *Globals) PrintDone(kind, id, what string) error {
	d := done{Kind: kind, ID: id, Result: what}
	return g.Printer().Print(Result{Data: d, Table: func(w io.Writer) {
		fmt.Fprintf(w, "%s %s %s\n", strings.ToUpper(kind[:1])+kind[1:], id, what)
	}})
}
