// Package snapshotfile is the framing of a state snapshot: a sequence of
// storev1.SnapshotRecord, each prefixed with its length as a uvarint, the
// first a header (schema version, index) and the last a trailer carrying the
// number of records before it and the CRC-32C (Castagnoli) of every byte
// before it. The store writes raft snapshots, backups and operator snapshots
// in this form; norsk-ctl inspects them with the same reader.
package snapshotfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/proto"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// MaxRecordSize bounds one record (a corrupt length is refused rather than
// allocated).
const MaxRecordSize = 64 << 20

var (
	// ErrCorrupt: the data is not a snapshot (bad framing, undecodable
	// record, no header, cut short).
	ErrCorrupt = errors.New("corrupt snapshot")
	// ErrChecksum: the snapshot is complete in form but its checksum or
	// record count does not match: it was altered or damaged.
	ErrChecksum = errors.New("snapshot fails its checksum")
)

var table = crc32.MakeTable(crc32.Castagnoli)

// Writer writes a snapshot. Put the header first; Close writes the trailer.
type Writer struct {
	bw      *bufio.Writer
	w       io.Writer
	crc     hash.Hash32
	records uint64
	n       int64
	buf     []byte
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer {
	crc := crc32.New(table)
	return &Writer{w: w, crc: crc, bw: bufio.NewWriterSize(io.MultiWriter(w, crc), 256<<10)}
}

// Put writes one record.
func (w *Writer) Put(rec *storev1.SnapshotRecord) error {
	var err error
	w.buf, err = proto.MarshalOptions{Deterministic: true}.MarshalAppend(w.buf[:0], rec)
	if err != nil {
		return err
	}
	var lenBuf [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(lenBuf[:], uint64(len(w.buf)))
	if _, err := w.bw.Write(lenBuf[:k]); err != nil {
		return err
	}
	if _, err := w.bw.Write(w.buf); err != nil {
		return err
	}
	w.records++
	w.n += int64(k + len(w.buf))
	return nil
}

// Close writes the trailer and flushes. It does not close the underlying
// writer. It returns the bytes written in all.
func (w *Writer) Close() (int64, error) {
	if err := w.bw.Flush(); err != nil {
		return w.n, err
	}
	b, err := proto.Marshal(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Trailer{Trailer: &storev1.SnapshotTrailer{
		Records: w.records, Crc32C: w.crc.Sum32(),
	}}})
	if err != nil {
		return w.n, err
	}
	var lenBuf [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(lenBuf[:], uint64(len(b)))
	if _, err := w.w.Write(lenBuf[:k]); err != nil {
		return w.n, err
	}
	if _, err := w.w.Write(b); err != nil {
		return w.n, err
	}
	w.n += int64(k + len(b))
	return w.n, nil
}

// Reader reads a snapshot record by record, checking the framing, the
// header and, at the end, the trailer.
type Reader struct {
	br      *bufio.Reader
	crc     hash.Hash32
	i       int
	header  *storev1.SnapshotHeader
	trailer bool
}

// NewReader returns a Reader on r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 256<<10), crc: crc32.New(table)}
}

// Header is the snapshot's header (nil before the first Next).
func (r *Reader) Header() *storev1.SnapshotHeader { return r.header }

// Next returns the next record other than the header and the trailer; the
// header is available from Header once Next has been called. At the end it
// returns io.EOF — only after the trailer has verified. Errors wrap
// ErrCorrupt or ErrChecksum.
func (r *Reader) Next() (*storev1.SnapshotRecord, error) {
	for {
		sum := r.crc.Sum32()
		size, err := binary.ReadUvarint(r.br)
		if err == io.EOF {
			if !r.trailer {
				if r.header == nil {
					return nil, fmt.Errorf("%w: empty", ErrCorrupt)
				}
				return nil, fmt.Errorf("%w: truncated (no trailer after %d records)", ErrCorrupt, r.i)
			}
			return nil, io.EOF
		}
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorrupt, r.i, err)
		}
		if r.trailer {
			return nil, fmt.Errorf("%w: data after the trailer", ErrCorrupt)
		}
		if size > MaxRecordSize {
			return nil, fmt.Errorf("%w: record %d is %d bytes", ErrCorrupt, r.i, size)
		}
		buf := make([]byte, size)
		if _, err := io.ReadFull(r.br, buf); err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorrupt, r.i, err)
		}
		var lenBuf [binary.MaxVarintLen64]byte
		_, _ = r.crc.Write(lenBuf[:binary.PutUvarint(lenBuf[:], size)])
		_, _ = r.crc.Write(buf)
		rec := &storev1.SnapshotRecord{}
		if err := proto.Unmarshal(buf, rec); err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorrupt, r.i, err)
		}
		i := r.i
		r.i++
		switch x := rec.GetRecord().(type) {
		case *storev1.SnapshotRecord_Header:
			if i != 0 {
				return nil, fmt.Errorf("%w: header at record %d", ErrCorrupt, i)
			}
			r.header = x.Header
			continue
		case *storev1.SnapshotRecord_Trailer:
			if r.header == nil {
				return nil, fmt.Errorf("%w: no header", ErrCorrupt)
			}
			if x.Trailer.GetRecords() != uint64(i) {
				return nil, fmt.Errorf("%w: the trailer counts %d records, %d were read", ErrChecksum, x.Trailer.GetRecords(), i)
			}
			if x.Trailer.GetCrc32C() != sum {
				return nil, fmt.Errorf("%w: trailer %08x, data %08x", ErrChecksum, x.Trailer.GetCrc32C(), sum)
			}
			r.trailer = true
			continue
		}
		if r.header == nil {
			return nil, fmt.Errorf("%w: no header", ErrCorrupt)
		}
		return rec, nil
	}
}
