package instance

import (
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/jobsocket"
	jsapi "github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

// The instance actor's part in the job sockets (internal/worker/jobsocket): it opens its
// instance's socket before the services are created, removes it once the
// instance has stopped or is forgotten, and gives the services its path.

// handoverAppliedEvent: the instance's job applied the handover of the
// migration it was started as the target of (internal/worker/jobsocket).
type handoverAppliedEvent struct {
	token       uint64
	migrationID string
}

// openJobSocket serves the instance's job socket (when the worker serves
// job sockets). A socket that cannot be made is logged and the instance
// runs without one: its output matters more than a later handover, which
// is then refused with a reason.
func (in *instance) openJobSocket() {
	js := in.sup.js
	if js == nil || in.rec == nil {
		return
	}
	info := jobsocket.Info{Token: in.rec.token(), RuntimeRole: in.rec.runtimeRole()}
	if id := in.rec.start.GetMigrationId(); id != "" && !in.rec.HandoverApplied {
		info.MigrationID = id
		if in.rec.start.GetMigrationHandover() {
			info.Handover, info.InitialState = true, in.rec.start.GetMigrationInitialState()
		}
	}
	if err := js.Open(in.key, info); err != nil && in.ctx().Err() == nil {
		in.log.Error("cannot make the instance's job socket; it runs without one", "err", err)
	}
}

// closeJobSocket removes the instance's job socket, if it has one.
func (in *instance) closeJobSocket() {
	if js := in.sup.js; js != nil {
		js.Remove(in.key)
	}
}

// jobSocketSpec adds the job socket's variables to env and returns the
// mounts the runtime needs for it: NORSK_JOB_SOCKET is the host path for
// host processes, for containers jsapi.ContainerPath with the socket's
// directory mounted read-only at jsapi.ContainerDir;
// NORSK_MIGRATION_HANDOVER=1 marks a handover's target.
func (in *instance) jobSocketSpec(env map[string]string) []runtime.Mount {
	js := in.sup.js
	if js == nil || !js.Has(in.key) {
		return nil // no socket: nothing to point at or mount
	}
	if in.rec.start.GetMigrationId() != "" && in.rec.start.GetMigrationHandover() && !in.rec.HandoverApplied {
		env[jsapi.EnvHandover] = "1"
	}
	if in.sup.rt.Name() != "docker" {
		env[jsapi.EnvSocket] = js.Path(in.key)
		return nil
	}
	env[jsapi.EnvSocket] = jsapi.ContainerPath
	return []runtime.Mount{{Source: js.Dir(in.key), Target: jsapi.ContainerDir, ReadOnly: true}}
}

// onHandoverApplied records that the target's migration was applied, so
// that the instance is not taken for a target again after a worker restart.
func (in *instance) onHandoverApplied(ev handoverAppliedEvent) {
	rec := in.rec
	if rec == nil || rec.token() != ev.token || rec.start.GetMigrationId() != ev.migrationID || rec.HandoverApplied {
		return
	}
	rec.HandoverApplied = true
	if err := in.save(rec); err != nil {
		in.log.Error("cannot record the applied handover", "err", err)
	}
}
