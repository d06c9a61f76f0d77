package state

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// shallowCopy returns a new message whose fields are m's: its sub-messages,
// lists and maps are m's own, shared, not copied.
//
// It is the FSM's copy-on-write of a stored row whose top-level fields a
// command changes (an instance's phase, a job's state): stored rows are never
// modified in place — an older snapshot may be reading them — so sharing
// what the new row does not change is safe, and costs a fraction of a deep
// proto.Clone (a job's services, tags and placement are not copied for a
// phase change). The caller may assign any field of the copy, but must not
// modify what a field points to (a map entry, a list element or its
// spare capacity, a sub-message): to change one, it assigns a fresh copy.
func shallowCopy[M proto.Message](m M) M {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
	return dst.Interface().(M)
}
