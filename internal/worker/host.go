package worker

import (
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
	"github.com/norsk-go/norsk-manager/internal/worker/instance"
)

// agentHost is what the instances (internal/worker/instance) are given of
// the agent.
type agentHost struct{ a *Agent }

var _ instance.Host = agentHost{}

func (h agentHost) Go(fn func()) { h.a.goOwned(fn) }

func (h agentHost) Publish(key runtime.Key, r *managerv1.InstanceReport, deliver func()) {
	h.a.publish(key, r, deliver)
}

func (h agentHost) Unpublish(key runtime.Key) { h.a.unpublish(key) }

func (h agentHost) SendReport(r *managerv1.InstanceReport) { h.a.sendReport(r) }

func (h agentHost) Notify(key runtime.Key, token uint64, kind, message string) {
	h.a.notify(key, token, kind, message)
}

func (h agentHost) Terminating() bool { return h.a.terminating.Load() }

func (h agentHost) Lease(now time.Time) (expired bool, why string, ends time.Time) {
	v := h.a.leaseView()
	if !v.expired(now) {
		return false, "", v.sent.Add(v.ttl)
	}
	return true, v.why(now), v.sent.Add(v.ttl)
}

func (h agentHost) WakeFence() { h.a.wakeFence() }

func (h agentHost) ImagesUsed(refs []string) {
	if inv := h.a.images; inv != nil {
		inv.MarkUsed(refs...)
	}
}
