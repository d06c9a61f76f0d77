package chqemu

import "fmt"

func fmtSscanHex(s string, n *int) (int, error) { return fmt.Sscanf(s, "%x", n) }
