package worker

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/worker/hostinfo"
)

// load is the node's measured load for a heartbeat.
func (a *Agent) load() *managerv1.NodeLoad {
	l := &managerv1.NodeLoad{
		CpuPercent: a.cpu.Sample(),
		Instances:  a.liveInstances(),
		MeasuredAt: timestamppb.New(a.clock.Now()),
	}
	if total, avail, err := hostinfo.Memory(); err == nil && total >= avail {
		l.MemoryUsedBytes = total - avail
	}
	return l
}
