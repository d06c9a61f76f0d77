package norsk

import (
	"context"
	"fmt"
	"io"

	"connectrpc.com/connect"
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// GetStoreInfo says what the Manager member's store is: every store's schema
// version (on disk, and the newest the binary writes), what its last boot
// did (a restore of an unreadable store from its newest backup, a schema
// migration with the pre-upgrade backup it took first), its backups (newest
// first), its applied index and its data directory. Answered by the member
// called, not forwarded.
func (m *Manager) GetStoreInfo(ctx context.Context) (*StoreInfo, error) {
	const op = "GetStoreInfo"
	if err := m.alive(op); err != nil {
		return nil, err
	}
	res, err := m.client.GetStoreInfo(ctx, connect.NewRequest(&managerv1.GetStoreInfoRequest{}))
	if err != nil {
		return nil, wrapError(op, err)
	}
	return res.Msg, nil
}

// SnapshotSave streams a consistent snapshot of the Manager's whole state
// into w (the file format of pkg/snapshotfile: a header with the schema
// version and index, the records, and a trailer with the record count and a
// CRC-32C; read it back with snapshotfile.Reader to verify it) and returns
// the bytes written. Writes the Manager applies meanwhile are not in it.
//
// On an error the bytes written so far are a partial snapshot: discard them
// (norsk-ctl operator snapshot save writes to a temporary file and renames
// it only when complete and verified). Closing m ends the stream. The error is an *Error: the stream's
// (ErrUnavailable, ErrCanceled, …), or ErrUnknown wrapping w's write error.
func (m *Manager) SnapshotSave(ctx context.Context, w io.Writer) (int64, error) {
	const op = "SnapshotSave"
	if err := m.alive(op); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(m.closed, cancel) // Close ends the stream
	defer stop()
	stream, err := m.streams.SnapshotSave(ctx, connect.NewRequest(&managerv1.SnapshotSaveRequest{}))
	if err != nil {
		return 0, wrapError(op, err)
	}
	defer stream.Close()
	var n int64
	for stream.Receive() {
		k, err := w.Write(stream.Msg().GetData())
		n += int64(k)
		if err != nil {
			return n, &Error{Op: op, Code: connect.CodeUnknown, Message: fmt.Sprintf("write the snapshot after %d bytes: %v", n, err), cause: err}
		}
	}
	if err := stream.Err(); err != nil {
		return n, wrapError(op, err)
	}
	return n, nil
}
