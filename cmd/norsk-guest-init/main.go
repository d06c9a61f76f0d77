// Command norsk-guest-init is the init (PID 1) of a worker microVM's
// initramfs: see internal/guestinit.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/norsk-go/norsk-manager/internal/guestinit"
)

func main() {
	err := guestinit.Main()
	fmt.Fprintf(os.Stderr, "guest-init: %v\n", err)
	if err == guestinit.ErrNotPID1 {
		os.Exit(2)
	}
	time.Sleep(time.Second) // the message reaches the serial port
	guestinit.PowerOff()
}
