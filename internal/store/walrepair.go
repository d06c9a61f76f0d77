package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// raft-wal v0.4.0's segment format, as far as sealRotation reads it: a
// 32-byte file header, then frames of an 8-byte header (type; three zero
// bytes; little-endian length, or CRC-32C for a commit frame) and a payload
// padded to 8 bytes. A segment is sealed by an index frame (the entries'
// file offsets, 4 bytes each) in the same commit as its last entries.
const (
	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
	walFrameEntry     = 1
	walFrameIndex     = 2
	walFrameCommit    = 3
)

// sealRotation finishes a segment rotation raft-wal left half done: the
// tail segment's file is sealed (its last commit wrote the index frame) but
// the meta database still calls it the unsealed tail, because the meta
// write that records the seal and the next segment failed (a full disk) or
// never happened (the process died between the two). raft-wal then refuses
// every append with "segment is sealed", even after a restart, since it
// starts a new segment only when its meta says the tail is sealed. This
// records the seal in the meta database as raft-wal's rotation would have
// and the next segment (only when the file's sealing commit verifies), so
// that opening the WAL creates that segment's file and appends go on. It
// reports whether it changed anything.
func sealRotation(dir string, meta types.MetaStore, log *slog.Logger) (bool, error) {
	ps, err := meta.Load(dir)
	if err != nil || len(ps.Segments) == 0 {
		return false, err
	}
	tail := &ps.Segments[len(ps.Segments)-1]
	if !tail.SealTime.IsZero() {
		return false, nil
	}
	path := filepath.Join(dir, segment.FileName(*tail))
	b, err := os.ReadFile(path)
	if err != nil {
		return false, nil // no file: raft-wal creates it at open
	}
	var (
		entries            int
		indexAt            = -1
		indexCount         int
		crcStart           int
		sealed             bool
		afterIndexIsCommit bool
	)
	for off := walFileHeaderLen; off+walFrameHeaderLen <= len(b); {
		typ, n := b[off], int(binary.LittleEndian.Uint32(b[off+4:off+8]))
		switch typ {
		case walFrameEntry, walFrameIndex:
			size := walFrameHeaderLen + n + (walFrameHeaderLen-n%walFrameHeaderLen)%walFrameHeaderLen
			if off+size > len(b) {
				return false, nil
			}
			if typ == walFrameEntry {
				entries++
			} else {
				indexAt, indexCount = off, n/4
			}
			off += size
			afterIndexIsCommit = typ == walFrameIndex
			continue
		case walFrameCommit:
			if afterIndexIsCommit && crc32.Checksum(b[crcStart:off], castagnoli) == uint32(n) {
				sealed = true
			}
			crcStart = off + walFrameHeaderLen
			off += walFrameHeaderLen
			afterIndexIsCommit = false
			continue
		}
		break // zeros (the end of what was written) or damage
	}
	if !sealed || indexAt < 0 || indexCount == 0 || indexCount != entries {
		return false, nil
	}
	// What raft-wal's rotation commits: the tail sealed, and the next
	// segment (its file is created when the WAL opens).
	now := time.Now()
	tail.SealTime = now
	tail.MaxIndex = tail.BaseIndex + uint64(indexCount) - 1
	tail.IndexStart = uint64(indexAt + walFrameHeaderLen)
	next := tail.MaxIndex + 1
	ps.Segments = append(ps.Segments, types.SegmentInfo{ID: ps.NextSegmentID, BaseIndex: next, MinIndex: next,
		SizeLimit: tail.SizeLimit, Codec: tail.Codec, CreateTime: now})
	ps.NextSegmentID++
	if err := meta.CommitState(ps); err != nil {
		return false, fmt.Errorf("record the seal of raft-log segment %s: %w", path, err)
	}
	log.Warn("finished a raft-log segment rotation that was cut short (its seal was written, the meta database did not record it); "+
		"the log starts its next segment", "segment", path, "max_index", next-1)
	return true, nil
}
