package sim

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// liteEvent is the part of a Manager Event the simulator's subscribers
// read, decoded straight from the wire: the fields below, by their numbers
// in event.proto and job.proto, every other field skipped unread. The
// subscribers share the machine's cores with the cluster they measure, and
// a full decode of every event (the whole job, its instance and placement,
// a map of tags) for each of 100 subscribers cost more than the Manager's
// own sending; this is wire-compatible with the Event message and allocates
// only the job id it keeps (decision 0062).
type liteEvent struct {
	index     uint64
	timestamp time.Time // zero when the event has none
	// initialDataComplete: the event is initial_data_complete; resync its
	// resync flag.
	initialDataComplete, resync bool
	// runningJobID is the job of a job_updated event whose history entry
	// is a running entry; snapshotRunningJobID that of a job_snapshot
	// showing an instance RUNNING.
	runningJobID, snapshotRunningJobID string
}

// Field numbers of the messages liteEvent reads.
const (
	fEventIndex               = 1  // Event.index
	fEventTimestamp           = 2  // Event.timestamp
	fEventJobSnapshot         = 10 // Event.job_snapshot (JobWithHistory)
	fEventInitialDataComplete = 12 // Event.initial_data_complete
	fEventJobUpdated          = 21 // Event.job_updated (JobEvent)
	fTimestampSeconds         = 1
	fTimestampNanos           = 2
	fIDCResync                = 2 // InitialDataComplete.resync
	fJobEventJob              = 1 // JobEvent.job (JobWithHistory)
	fJobEventEntry            = 2 // JobEvent.entry (JobHistoryEntry)
	fJWHJob                   = 1 // JobWithHistory.job (Job)
	fJWHInstances             = 3 // JobWithHistory.instances (Instance)
	fJobID                    = 1 // Job.job_id
	fInstancePhase            = 6 // Instance.phase
	fEntryRunning             = 14
)

var errLiteWire = errors.New("malformed event")

// fields calls f for each field of the message in b: its number, wire type
// and, for a length-delimited field, its bytes (else the varint's value).
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v uint64, data []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errLiteWire
		}
		b = b[n:]
		var v uint64
		var data []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			data, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errLiteWire
		}
		b = b[n:]
		if err := f(num, typ, v, data); err != nil {
			return err
		}
	}
	return nil
}

// decodeLiteEvent decodes what liteEvent holds of an encoded Event.
func decodeLiteEvent(b []byte, ev *liteEvent) error {
	*ev = liteEvent{}
	var jobUpdated []byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, data []byte) error {
		switch {
		case num == fEventIndex && typ == protowire.VarintType:
			ev.index = v
		case num == fEventTimestamp && typ == protowire.BytesType:
			var sec, nsec uint64
			if err := fields(data, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
				if typ == protowire.VarintType {
					switch num {
					case fTimestampSeconds:
						sec = v
					case fTimestampNanos:
						nsec = v
					}
				}
				return nil
			}); err != nil {
				return err
			}
			ev.timestamp = time.Unix(int64(sec), int64(int32(nsec))).UTC()
		case num == fEventInitialDataComplete && typ == protowire.BytesType:
			ev.initialDataComplete = true
			return fields(data, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
				if num == fIDCResync && typ == protowire.VarintType {
					ev.resync = v != 0
				}
				return nil
			})
		case num == fEventJobUpdated && typ == protowire.BytesType:
			jobUpdated = data
		case num == fEventJobSnapshot && typ == protowire.BytesType:
			id, running, err := liteJobWithHistory(data)
			if err != nil {
				return err
			}
			if running {
				ev.snapshotRunningJobID = id
			}
		}
		return nil
	})
	if err != nil || jobUpdated == nil {
		return err
	}
	// job_updated: the job's id when its entry is a running entry.
	var job []byte
	running := false
	err = fields(jobUpdated, func(num protowire.Number, typ protowire.Type, _ uint64, data []byte) error {
		switch {
		case num == fJobEventJob && typ == protowire.BytesType:
			job = data
		case num == fJobEventEntry && typ == protowire.BytesType:
			return fields(data, func(num protowire.Number, typ protowire.Type, _ uint64, _ []byte) error {
				if num == fEntryRunning && typ == protowire.BytesType {
					running = true
				}
				return nil
			})
		}
		return nil
	})
	if err != nil || !running {
		return err
	}
	id, _, err := liteJobWithHistory(job)
	ev.runningJobID = id
	return err
}

// liteJobWithHistory reads a JobWithHistory's job id and whether one of its
// instances is RUNNING.
func liteJobWithHistory(b []byte) (jobID string, running bool, err error) {
	err = fields(b, func(num protowire.Number, typ protowire.Type, _ uint64, data []byte) error {
		switch {
		case num == fJWHJob && typ == protowire.BytesType:
			return fields(data, func(num protowire.Number, typ protowire.Type, _ uint64, data []byte) error {
				if num == fJobID && typ == protowire.BytesType {
					jobID = string(data)
				}
				return nil
			})
		case num == fJWHInstances && typ == protowire.BytesType:
			return fields(data, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
				if num == fInstancePhase && typ == protowire.VarintType && managerv1.InstancePhase(v) == managerv1.InstancePhase_INSTANCE_PHASE_RUNNING {
					running = true
				}
				return nil
			})
		}
		return nil
	})
	return jobID, running, err
}

// liteCodec is the subscribers' codec: requests are encoded as protobuf,
// events decoded into a liteEvent.
type liteCodec struct{}

func (liteCodec) Name() string { return "proto" }

func (liteCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.Marshal(pm)
}

func (liteCodec) Unmarshal(b []byte, m any) error {
	ev, ok := m.(*liteEvent)
	if !ok {
		return fmt.Errorf("liteCodec decodes events, not %T", m)
	}
	return decodeLiteEvent(b, ev)
}
