package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/hashicorp/raft"
)

// A command's checksum travels in its raft log entry's Extensions (decision
// 0026), beside the command, never inside it:
//
//	byte 0     'N'  (checksumMagic)
//	byte 1     the envelope's version, 1 or later (checksumVersion)
//	bytes 2-5  CRC-32C (Castagnoli) of the entry's Data, big-endian
//	bytes 6-   later versions may append fields; a reader ignores them
//
// The proposer (Store.Apply) stamps it; every member verifies it before it
// applies the entry, at boot (checkLog) and at run time (fsm.Apply). An entry
// with no Extensions was written before checksums existed (or by an older
// binary in a mixed cluster) and replays unchecked. raft stores and
// replicates Extensions with the entry and hands them to the FSM; a binary
// that does not know them ignores them, so an older member still applies
// the command.
const (
	checksumMagic   = 'N'
	checksumVersion = 1
	checksumLen     = 6
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errChecksum marks a log entry whose command does not match its checksum:
// the copy on this member's disk (or in its memory) was altered.
var errChecksum = errors.New("checksum mismatch")

// stampChecksum is the Extensions of a log entry carrying data.
func stampChecksum(data []byte) []byte {
	ext := make([]byte, checksumLen)
	ext[0] = checksumMagic
	ext[1] = checksumVersion
	binary.BigEndian.PutUint32(ext[2:], crc32.Checksum(data, castagnoli))
	return ext
}

// verifyChecksum checks a command entry against its checksum. It returns
// whether the entry carried one (false: an entry from before checksums,
// taken as it is) and an error wrapping errChecksum when the entry does not
// match it or its envelope is not one this binary reads.
func verifyChecksum(l *raft.Log) (checked bool, err error) {
	ext := l.Extensions
	if len(ext) == 0 {
		return false, nil
	}
	if len(ext) < checksumLen || ext[0] != checksumMagic || ext[1] == 0 {
		return true, fmt.Errorf("%w: raft log entry %d has an envelope this binary does not know (% x)", errChecksum, l.Index, ext[:min(len(ext), 8)])
	}
	want := binary.BigEndian.Uint32(ext[2:6])
	if got := crc32.Checksum(l.Data, castagnoli); got != want {
		return true, fmt.Errorf("%w: raft log entry %d (term %d, %d bytes): its command's CRC-32C is %08x, the proposer stamped %08x",
			errChecksum, l.Index, l.Term, len(l.Data), got, want)
	}
	return true, nil
}
