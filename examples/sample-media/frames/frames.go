// Package frames is the wire format of the sample media job's frame stream,
// and a continuity checker for it.
//
// The sample media job (examples/sample-media) sends one record per frame: as
// one UDP datagram, or appended to a file or to stdout. A record is a fixed
// layout, all integers big-endian:
//
//	offset  size  field
//	0       4     magic "NSKF"
//	4       1     version (1)
//	5       1     S: length of the stream id in bytes (0..255)
//	6       2     P: length of the payload in bytes (0..MaxPayloadLen)
//	8       8     sequence number (uint64)
//	16      8     send time, wall clock, unix nanoseconds (int64)
//	24      S     stream id (opaque bytes; the sample job uses its job id)
//	24+S    P     payload (opaque bytes)
//	24+S+P  4     CRC-32C (Castagnoli) of bytes [0, 24+S+P)
//
// A record is therefore 28+S+P bytes long; its header says how long, so
// records can be read back to back from a byte stream (see Reader). The
// largest record (MaxRecordLen) fits one unfragmented UDP datagram on a
// 1500-byte MTU link.
//
// Encoding is canonical: Decode accepts exactly the bytes Encode produces
// for some Frame, so Encode(Decode(b)) == b for every b Decode accepts.
//
// Checker consumes decoded frames and reports the stream's continuity
// (missing ranges, duplicates, reordering, gaps in time); tests use it to
// show that a migration between a source and a target lost or duplicated no
// frame.
package frames

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Format constants.
const (
	// Magic opens every record.
	Magic = "NSKF"
	// Version is the only record version this package writes and reads.
	Version = 1
	// HeaderLen is the length of the fixed part before the stream id.
	HeaderLen = 24
	// TrailerLen is the length of the checksum after the payload.
	TrailerLen = 4
	// MaxStreamIDLen is the longest stream id a record can carry.
	MaxStreamIDLen = 255
	// MaxPayloadLen is the longest payload this package writes or accepts.
	MaxPayloadLen = 1024
	// MinRecordLen is the length of a record with an empty stream id and
	// payload.
	MinRecordLen = HeaderLen + TrailerLen
	// MaxRecordLen is the length of the longest valid record.
	MaxRecordLen = HeaderLen + MaxStreamIDLen + MaxPayloadLen + TrailerLen
)

// Errors Decode and Reader return, matched with errors.Is. Each is wrapped
// with detail.
var (
	// ErrShort: fewer bytes than a record header, or than the record's
	// header says the record has.
	ErrShort = errors.New("frames: short record")
	// ErrBadMagic: the record does not start with Magic.
	ErrBadMagic = errors.New("frames: bad magic")
	// ErrVersion: a record version this package does not read.
	ErrVersion = errors.New("frames: unsupported version")
	// ErrTooLong: a payload longer than MaxPayloadLen (or, on Encode, a
	// stream id longer than MaxStreamIDLen).
	ErrTooLong = errors.New("frames: field too long")
	// ErrChecksum: the record's CRC-32C does not match its contents.
	ErrChecksum = errors.New("frames: checksum mismatch")
	// ErrTrailing: Decode was given more bytes than one record.
	ErrTrailing = errors.New("frames: trailing bytes after record")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Frame is one decoded record.
type Frame struct {
	// Seq is the frame's sequence number. A stream counts up by one per
	// frame; a migration target continues from where its source stopped.
	Seq uint64
	// SentUnixNano is the sender's wall-clock time when it sent the frame.
	SentUnixNano int64
	// StreamID names the stream (at most MaxStreamIDLen bytes).
	StreamID string
	// Payload is opaque (at most MaxPayloadLen bytes). Decode returns a
	// copy, never a slice of its input; an empty payload decodes as nil.
	Payload []byte
}

// RecordLen returns the encoded length of f. It does not check the limits.
func (f Frame) RecordLen() int {
	return HeaderLen + len(f.StreamID) + len(f.Payload) + TrailerLen
}

// Encode returns the record for f. It fails with ErrTooLong when the stream
// id or the payload is over its limit.
func Encode(f Frame) ([]byte, error) {
	return Append(make([]byte, 0, f.RecordLen()), f)
}

// Append appends the record for f to dst and returns the extended slice; on
// error dst is returned unchanged. It fails with ErrTooLong when the stream
// id or the payload is over its limit.
func Append(dst []byte, f Frame) ([]byte, error) {
	if len(f.StreamID) > MaxStreamIDLen {
		return dst, fmt.Errorf("%w: stream id is %d bytes, max %d", ErrTooLong, len(f.StreamID), MaxStreamIDLen)
	}
	if len(f.Payload) > MaxPayloadLen {
		return dst, fmt.Errorf("%w: payload is %d bytes, max %d", ErrTooLong, len(f.Payload), MaxPayloadLen)
	}
	start := len(dst)
	dst = append(dst, Magic...)
	dst = append(dst, Version, byte(len(f.StreamID)))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(f.Payload)))
	dst = binary.BigEndian.AppendUint64(dst, f.Seq)
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.SentUnixNano))
	dst = append(dst, f.StreamID...)
	dst = append(dst, f.Payload...)
	dst = binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
	return dst, nil
}

// recordLen validates the fixed header at the start of b (which must hold
// at least HeaderLen bytes) and returns the whole record's length.
func recordLen(b []byte) (int, error) {
	if !bytes.Equal(b[:4], []byte(Magic)) {
		return 0, fmt.Errorf("%w: got %q", ErrBadMagic, b[:4])
	}
	if b[4] != Version {
		return 0, fmt.Errorf("%w: %d (want %d)", ErrVersion, b[4], Version)
	}
	p := int(binary.BigEndian.Uint16(b[6:8]))
	if p > MaxPayloadLen {
		return 0, fmt.Errorf("%w: payload length %d, max %d", ErrTooLong, p, MaxPayloadLen)
	}
	return HeaderLen + int(b[5]) + p + TrailerLen, nil
}

// Decode decodes b, which must be exactly one record (a UDP datagram, say).
// It never panics, whatever b holds, and the Frame it returns shares no
// memory with b. Errors: ErrShort, ErrBadMagic, ErrVersion, ErrTooLong,
// ErrChecksum, ErrTrailing.
func Decode(b []byte) (Frame, error) {
	if len(b) < HeaderLen {
		return Frame{}, fmt.Errorf("%w: %d bytes, a header is %d", ErrShort, len(b), HeaderLen)
	}
	n, err := recordLen(b)
	if err != nil {
		return Frame{}, err
	}
	switch {
	case len(b) < n:
		return Frame{}, fmt.Errorf("%w: %d bytes, the header says %d", ErrShort, len(b), n)
	case len(b) > n:
		return Frame{}, fmt.Errorf("%w: %d bytes, the header says %d", ErrTrailing, len(b), n)
	}
	body, sum := b[:n-TrailerLen], binary.BigEndian.Uint32(b[n-TrailerLen:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return Frame{}, fmt.Errorf("%w: record says %08x, contents give %08x", ErrChecksum, sum, got)
	}
	s := int(b[5])
	f := Frame{
		Seq:          binary.BigEndian.Uint64(b[8:16]),
		SentUnixNano: int64(binary.BigEndian.Uint64(b[16:24])),
		StreamID:     string(b[HeaderLen : HeaderLen+s]),
	}
	if payload := body[HeaderLen+s:]; len(payload) > 0 {
		f.Payload = bytes.Clone(payload)
	}
	return f, nil
}

// Reader reads records written back to back to a byte stream (a file or
// stdout sink). It does not resynchronise: after an error other than io.EOF
// the stream's framing is lost and the caller should stop reading.
type Reader struct {
	r   io.Reader
	buf []byte
}

// NewReader returns a Reader reading from r. Wrap r in a bufio.Reader if
// small reads are costly.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: r, buf: make([]byte, MaxRecordLen)}
}

// Read returns the next frame. It returns io.EOF, unwrapped, when the stream
// ends cleanly at a record boundary; a stream that ends inside a record is
// ErrShort (wrapping io.ErrUnexpectedEOF). Other errors are Decode's.
func (r *Reader) Read() (Frame, error) {
	if _, err := io.ReadFull(r.r, r.buf[:HeaderLen]); err != nil {
		if err == io.EOF {
			return Frame{}, io.EOF
		}
		return Frame{}, fmt.Errorf("%w: %w", ErrShort, err)
	}
	n, err := recordLen(r.buf[:HeaderLen])
	if err != nil {
		return Frame{}, err
	}
	if _, err := io.ReadFull(r.r, r.buf[HeaderLen:n]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, fmt.Errorf("%w: %w", ErrShort, err)
	}
	return Decode(r.buf[:n])
}
