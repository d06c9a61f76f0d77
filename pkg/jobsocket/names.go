package jobsocket

// Names the worker, the Manager and applications share.
const (
	// Capability is the node capability (count 1) a worker advertises when
	// it serves job sockets (norsk-ctl worker --job-socket). Placement of a
	// handover migration's target requires it.
	Capability = "jobSocket"
	// EnvSocket is the environment variable that gives an instance the path
	// of its job socket. It is unset when the worker serves none.
	EnvSocket = "NORSK_JOB_SOCKET"
	// EnvHandover is "1" on the target of a handover migration (set by a
	// worker with job sockets, beside NORSK_MIGRATION_ID): the job must not
	// start output until it is told where to start (apply_from). A target
	// of another strategy (NORSK_MIGRATION_ID without it) starts as usual.
	EnvHandover = "NORSK_MIGRATION_HANDOVER"
	// ContainerDir is where the docker runtime mounts the instance's socket
	// directory inside each of its containers (read-only).
	ContainerDir = "/run/norsk"
	// SocketName is the socket's file name in its directory.
	SocketName = "job.sock"
	// ContainerPath is NORSK_JOB_SOCKET inside a container.
	ContainerPath = ContainerDir + "/" + SocketName
	// Protocol is the job socket protocol version this package speaks, sent
	// in hello and answered in hello_ack.
	Protocol = "1"
)
