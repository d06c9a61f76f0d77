// Command norsk-manager is the Manager daemon; see `norsk-manager --help`.
package main

import (
	"os"

	"github.com/norsk-go/norsk-manager/internal/managercmd"
)

func main() { os.Exit(managercmd.Execute()) }
