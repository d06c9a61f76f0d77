package state

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// SchemaVersion is the version of the state's record formats. A change that
// an older binary cannot read bumps it (and comes with a migration).
const SchemaVersion = 1

// MaxRecordSize bounds one snapshot record (a corrupt length is refused
// rather than allocated).
const MaxRecordSize = 64 << 20

// crcTable is the Castagnoli table snapshot trailers use.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// WriteTo writes every row of the view as a snapshot: a header, then the
// nodes, jobs and instances, each a uvarint-length-prefixed SnapshotRecord,
// then a trailer with the record count and the CRC-32C of everything before.
func (r *Read) WriteTo(w io.Writer) (int64, error) {
	crc := crc32.New(crcTable)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 256<<10)
	var n int64
	var records uint64
	var buf []byte
	put := func(rec *storev1.SnapshotRecord) error {
		records++
		var err error
		buf, err = proto.MarshalOptions{Deterministic: true}.MarshalAppend(buf[:0], rec)
		if err != nil {
			return err
		}
		var lenBuf [binary.MaxVarintLen64]byte
		k := binary.PutUvarint(lenBuf[:], uint64(len(buf)))
		if _, err := bw.Write(lenBuf[:k]); err != nil {
			return err
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		n += int64(k + len(buf))
		return nil
	}
	if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Header{Header: &storev1.SnapshotHeader{
		SchemaVersion: SchemaVersion, Index: r.Index(),
	}}}); err != nil {
		return n, err
	}
	for _, node := range r.Nodes(nil) {
		if err := put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Node{Node: node}}); err != nil {
			return n, err
		}
	}
	var err error
	r.Jobs(nil, "", func(j *storev1.JobRecord) bool {
		err = put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Job{Job: j}})
		return err == nil
	})
	if err != nil {
		return n, err
	}
	r.Instances(nil, func(in *managerv1.Instance) bool {
		err = put(&storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Instance{Instance: in}})
		return err == nil
	})
	if err != nil {
		return n, err
	}
	if err := bw.Flush(); err != nil {
		return n, err
	}
	trailer := &storev1.SnapshotRecord{Record: &storev1.SnapshotRecord_Trailer{Trailer: &storev1.SnapshotTrailer{
		Records: records, Crc32C: crc.Sum32(),
	}}}
	bw = bufio.NewWriter(w)
	if err := put(trailer); err != nil {
		return n, err
	}
	return n, bw.Flush()
}

// ErrCorruptSnapshot is returned for a snapshot that cannot be decoded.
var ErrCorruptSnapshot = errors.New("corrupt snapshot")

// Restore replaces the whole state with a snapshot's rows. Watchers of the
// old state are woken (AbandonCh) so they read again. On error the state is
// unchanged.
func (s *State) Restore(rd io.Reader) (header *storev1.SnapshotHeader, err error) {
	g := newGeneration()
	txn := g.db.Txn(true)
	crc := crc32.New(crcTable)
	br := bufio.NewReaderSize(rd, 256<<10)
	var trailer *storev1.SnapshotTrailer
	for i := 0; ; i++ {
		sum := crc.Sum32()
		size, err := binary.ReadUvarint(br)
		if err == io.EOF {
			break
		}
		if trailer != nil {
			return nil, fmt.Errorf("%w: data after the trailer", ErrCorruptSnapshot)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorruptSnapshot, i, err)
		}
		if size > MaxRecordSize {
			return nil, fmt.Errorf("%w: record %d is %d bytes", ErrCorruptSnapshot, i, size)
		}
		buf := make([]byte, size)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorruptSnapshot, i, err)
		}
		var lenBuf [binary.MaxVarintLen64]byte
		_, _ = crc.Write(lenBuf[:binary.PutUvarint(lenBuf[:], size)])
		_, _ = crc.Write(buf)
		rec := &storev1.SnapshotRecord{}
		if err := proto.Unmarshal(buf, rec); err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorruptSnapshot, i, err)
		}
		switch x := rec.GetRecord().(type) {
		case *storev1.SnapshotRecord_Header:
			if i != 0 {
				return nil, fmt.Errorf("%w: header at record %d", ErrCorruptSnapshot, i)
			}
			if x.Header.GetSchemaVersion() > SchemaVersion {
				return nil, fmt.Errorf("snapshot schema version %d is newer than this binary's %d; upgrade the Manager", x.Header.GetSchemaVersion(), SchemaVersion)
			}
			header = x.Header
			err = txn.Insert(tableMeta, &metaRow{Key: "index", Value: x.Header.GetIndex()})
		case *storev1.SnapshotRecord_Node:
			err = txn.Insert(tableNodes, x.Node)
		case *storev1.SnapshotRecord_Job:
			err = txn.Insert(tableJobs, x.Job)
		case *storev1.SnapshotRecord_Instance:
			err = txn.Insert(tableInstances, x.Instance)
		case *storev1.SnapshotRecord_Trailer:
			trailer = x.Trailer
			switch {
			case trailer.GetRecords() != uint64(i):
				return nil, fmt.Errorf("%w: the trailer counts %d records, %d were read", ErrCorruptSnapshot, trailer.GetRecords(), i)
			case trailer.GetCrc32C() != sum:
				return nil, fmt.Errorf("%w: checksum mismatch (trailer %08x, data %08x)", ErrCorruptSnapshot, trailer.GetCrc32C(), sum)
			}
		default:
			if i == 0 {
				return nil, fmt.Errorf("%w: no header", ErrCorruptSnapshot)
			}
			// A record type from a newer binary within the same schema
			// version is skippable by design.
		}
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorruptSnapshot, i, err)
		}
		if header == nil {
			return nil, fmt.Errorf("%w: no header", ErrCorruptSnapshot)
		}
	}
	if header == nil {
		return nil, fmt.Errorf("%w: empty", ErrCorruptSnapshot)
	}
	if trailer == nil {
		return nil, fmt.Errorf("%w: truncated (no trailer)", ErrCorruptSnapshot)
	}
	txn.Commit()
	old := s.cur.Swap(g)
	close(old.abandon)
	return header, nil
}
