// Package jobsocket is the Go client of the job socket: the Unix socket a
// Norsk worker started with --job-socket hands every instance it runs, over
// which the Manager's handover migration talks to the media application
// (docs/job-socket.md is the protocol; api/proto/norsk/manager/v1/
// job_socket.proto the wire format).
//
// A media application finds the socket in the environment variable
// NORSK_JOB_SOCKET (EnvSocket): a host path for the process runtime,
// /run/norsk/job.sock (ContainerPath) inside a container. It dials it once
// and runs a Session for its whole life:
//
//	s, err := jobsocket.Dial(ctx, os.Getenv(jobsocket.EnvSocket), jobsocket.WithClient("my-encoder 1.2"))
//	if err != nil { … }
//	defer s.Close()
//	go s.Run(ctx, myHandler) // returns when ctx ends
//
// Run sends hello, receives hello_ack (the instance's identity: OnAttached)
// and then calls the Handler for every message the worker sends, one at a
// time and in order, replying with what the handler returns. When the
// stream ends (EOF: the worker restarted, say) Run dials again with a
// jittered backoff and attaches again; the worker re-creates the socket at
// the same path, so a running job always finds it. The application may send
// Ready and Abort at any time from any goroutine while attached.
//
// The package also names what the worker and the Manager share: the
// capability a worker with the job socket advertises (Capability), the
// environment variable and the path inside a container.
package jobsocket
