package events

import (
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/eventsubject"
)

// Entry is one published event as the broker holds it: the message, shared
// by every subscriber and never modified, and what is worked out of it once
// for all of them, when the first of them asks — its protobuf encoding
// (Wire) and what it is about (Kind, Subject). An event sent to a hundred
// subscribers is encoded once, not a hundred times.
//
// Its methods may be called from any number of goroutines.
type Entry struct {
	msg *managerv1.Event
	// index is msg's, kept beside it: subscribers read it for every entry
	// they pass, and here it costs no trip to the message.
	index uint64
	// at is when the broker published it, size its EstimatedSize (zero
	// for an entry NewEntry made).
	at   time.Time
	size int64

	wireOnce sync.Once
	wire     []byte
	wireErr  error

	aboutOnce sync.Once
	about     *about // made when first asked for: most subscribers filter nothing
}

// about is what an event is about.
type about struct {
	kind    string
	subject eventsubject.Subject
}

// NewEntry holds ev as the broker does (for code that sends an event that
// was not published, and for tests). ev must not be modified afterwards.
func NewEntry(ev *managerv1.Event) *Entry { return &Entry{msg: ev, index: ev.GetIndex()} }

// Event is the event. It must not be modified.
func (e *Entry) Event() *managerv1.Event { return e.msg }

// Message is the event as a proto.Message (a codec encoding it otherwise
// than as protobuf, e.g. JSON, encodes this).
func (e *Entry) Message() proto.Message { return e.msg }

// Index is the event's store index.
func (e *Entry) Index() uint64 { return e.index }

// Wire is the event's protobuf encoding, made by the first call and
// shared: the caller must not modify it.
func (e *Entry) Wire() ([]byte, error) {
	e.wireOnce.Do(func() {
		// A published entry's message had its size worked out
		// (EstimatedSize) and is never modified: the encoding reuses the
		// sizes the message cached then rather than working them out again.
		e.wire, e.wireErr = proto.MarshalOptions{UseCachedSize: e.size > 0}.Marshal(e.msg)
	})
	return e.wire, e.wireErr
}

// Kind is eventsubject.Kind of the event, worked out once.
func (e *Entry) Kind() string { return e.aboutIt().kind }

// Subject is eventsubject.Of the event, worked out once. Its NodeIDs must
// not be modified.
func (e *Entry) Subject() eventsubject.Subject { return e.aboutIt().subject }

func (e *Entry) aboutIt() *about {
	e.aboutOnce.Do(func() { e.about = &about{kind: eventsubject.Kind(e.msg), subject: eventsubject.Of(e.msg)} })
	return e.about
}

var _ eventsubject.Described = (*Entry)(nil)

// The memory an event costs the broker, estimated from its encoded size
// (EstimatedSize): measured on a job's event as a large fleet raises it
// (381 bytes encoded: 2,154 bytes of heap as a message and its entry,
// 2,538 once a subscriber has encoded it) and on a job's deletion (41
// bytes: 336 and 384), a decoded protobuf message and its entry take
// about 6.3 bytes per encoded byte and 125 bytes more, the encoding
// included (decision 0066; BenchmarkHeldMemory measures it again).
const (
	entryOverhead  = 128
	heapPerWireX2  = 13 // bytes of memory per encoded byte, times two
	estimateFactor = 2
)

// EstimatedSize is the memory the broker counts an event as holding: 128
// bytes and 6.5 bytes per byte of its protobuf encoding (its message, its
// entry and, once a subscriber has asked for it, its encoding). It works
// out the encoded size (proto.Size), which the message caches.
func EstimatedSize(ev *managerv1.Event) int64 {
	return entryOverhead + int64(proto.Size(ev))*heapPerWireX2/estimateFactor
}
