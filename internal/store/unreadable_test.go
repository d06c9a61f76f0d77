package store

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// Only the store's content makes it unreadable: errors of the environment
// must never lead a caller to discard it.
func TestUnreadableClassifiesErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errors.New("segment 3: checksum mismatch"), true},
		{fmt.Errorf("open: %w", fs.ErrPermission), false},
		{&fs.PathError{Op: "write", Path: "/d/wal", Err: syscall.ENOSPC}, false},
		{&fs.PathError{Op: "open", Path: "/d/wal", Err: syscall.EMFILE}, false},
		{&fs.PathError{Op: "read", Path: "/d/wal", Err: syscall.EIO}, false},
	} {
		if got := errors.Is(unreadable(tc.err), ErrUnreadable); got != tc.want {
			t.Errorf("unreadable(%v) is ErrUnreadable = %v, want %v", tc.err, got, tc.want)
		}
	}
}
