// Command testprog is the service the runtime conformance tests run, as a
// host process (process runtime) and as the entrypoint of an image built FROM
// scratch (docker runtime). It has no dependencies beyond the standard
// library and needs no files, so it runs in an empty image.
//
// Flags:
//
//	-exit N         exit code when it exits by itself (default 0)
//	-run D          run for D, then exit; 0 runs until signalled
//	-ignore-term    ignore SIGTERM (only SIGKILL ends it)
//	-listen P       accept TCP connections for container port P, on the host
//	                port in $NORSK_PORT_<P> when set (process runtime), else P
//	-print-env      print the environment, sorted, one variable a line
//
// On SIGTERM (unless ignored) or SIGINT it exits with 128+signal, as a
// process killed by that signal would be reported: it may run as PID 1 in a
// container, where signals with no handler are not delivered.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"
)

func main() {
	exit := flag.Int("exit", 0, "exit code when exiting by itself")
	run := flag.Duration("run", 0, "how long to run; 0 = until signalled")
	ignoreTerm := flag.Bool("ignore-term", false, "ignore SIGTERM")
	listen := flag.Uint("listen", 0, "container port to accept TCP connections on")
	printEnv := flag.Bool("print-env", false, "print the environment")
	flag.Parse()

	if *printEnv {
		env := os.Environ()
		sort.Strings(env)
		for _, kv := range env {
			fmt.Println(kv)
		}
	}

	sigs := make(chan os.Signal, 1)
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
		signal.Notify(sigs, syscall.SIGINT)
	} else {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	}

	if *listen != 0 {
		port := fmt.Sprint(*listen)
		if p := os.Getenv(fmt.Sprintf("NORSK_PORT_%d", *listen)); p != "" {
			port = p
		}
		ln, err := net.Listen("tcp", ":"+port)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testprog:", err)
			os.Exit(111)
		}
		go serve(ln)
		fmt.Println("testprog: listening on", ln.Addr())
	}
	fmt.Println("testprog: ready")

	var timeout <-chan time.Time
	if *run > 0 {
		timeout = time.After(*run)
	}
	select {
	case <-timeout:
		os.Exit(*exit)
	case s := <-sigs:
		os.Exit(128 + int(s.(syscall.Signal)))
	}
}

// serve answers every connection with "testprog\n" and closes it.
func serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte("testprog\n"))
		_ = c.Close()
	}
}
