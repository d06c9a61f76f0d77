// Command norsk-mgr is the operator console and control-plane companion
// that runs beside each Manager member; see `norsk-mgr --help`.
package main

import (
	"os"

	"github.com/norsk-go/norsk-manager/internal/mgr/mgrcmd"
)

func main() { os.Exit(mgrcmd.Execute()) }
