package intercept

import (
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
)

// Encoded is a message sent with an encoding made once and shared by every
// stream that sends it: the Manager's events, each encoded once for all
// of its subscribers (events.Entry; decision 0062). A handler sends it
// through its stream's conn (connect.ServerStream.Conn().Send); the binary
// codec writes Wire as it is, the JSON codecs encode Message.
type Encoded interface {
	Message() proto.Message
	// Wire is Message's protobuf encoding. The codec does not modify it.
	Wire() ([]byte, error)
}

// protoBinary is the API's binary protobuf codec: connect-go's own
// behaviour (proto.Marshal, proto.Unmarshal), and an Encoded message's
// shared bytes copied instead of encoded again.
type protoBinary struct{}

// ProtoCodec replaces connect's binary protobuf codec with one that sends an
// Encoded message's shared encoding.
func ProtoCodec() connect.HandlerOption { return connect.WithCodec(protoBinary{}) }

func (protoBinary) Name() string { return "proto" }

func (protoBinary) IsBinary() bool { return true }

// Marshal returns bytes of the caller's own: connect recycles them.
func (c protoBinary) Marshal(m any) ([]byte, error) {
	if e, ok := m.(Encoded); ok {
		w, err := e.Wire()
		if err != nil {
			return nil, err
		}
		return slices.Clone(w), nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.Marshal(pm)
}

// MarshalAppend appends to dst (a buffer connect recycles), never returning
// the shared bytes themselves.
func (protoBinary) MarshalAppend(dst []byte, m any) ([]byte, error) {
	if e, ok := m.(Encoded); ok {
		w, err := e.Wire()
		if err != nil {
			return nil, err
		}
		return append(dst, w...), nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

func (protoBinary) MarshalStable(m any) ([]byte, error) {
	if e, ok := m.(Encoded); ok {
		m = e.Message()
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(pm)
}

func (protoBinary) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	if err := proto.Unmarshal(data, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", m, err)
	}
	return nil
}
