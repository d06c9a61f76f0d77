package cmdutil

import (
	"fmt"
	"io"
	"os"
)

// ReadInput reads the file name ("-" = stdin); what names it in errors.
func (g *Globals) ReadInput(name, what string) ([]byte, error) {
	if name == "-" {
		data, err := io.ReadAll(g.In)
		if err != nil {
			return nil, fmt.Errorf("read %s from stdin: %w", what, err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return data, nil
}
