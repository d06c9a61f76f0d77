// Command norsk-ctl is the command-line client of the Norsk Manager (see
// internal/cli). The seed's worker form, norsk-ctl --mode=worker --token=…
// --manager-url=…, runs the worker subcommand.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/norsk-go/norsk-manager/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, cli.TranslateLegacyMode(os.Args[1:]), os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
