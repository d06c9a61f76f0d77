package cli

import (
	"fmt"
	"io"
	"os"
)

// readInput reads the file name ("-" = stdin); what names it in errors.
func (g *globals) readInput(name, what string) ([]byte, error) {
	if name == "-" {
		data, err := io.ReadAll(g.in)
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
