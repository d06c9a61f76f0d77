package hostagent

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// sector is the first-boot disk's granularity: a block device is read in
// whole sectors.
const sector = 512

// cloneOrCopy makes dst a copy of src: a copy-on-write clone (FICLONE:
// btrfs, XFS with reflink, bcachefs) where the file system can make one,
// else a byte copy. It reports whether it cloned.
func cloneOrCopy(src, dst string) (cloned bool, err error) {
	in, err := os.Open(src)
	if err != nil {
		return false, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return false, err
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err == nil {
		return true, out.Close()
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return false, fmt.Errorf("copy the base image: %w", err)
	}
	if err := out.Sync(); err != nil {
		_ = out.Close()
		return false, err
	}
	return false, out.Close()
}

// writeFirstBootDisk writes the raw first-boot disk: the data, padded with
// NULs to whole sectors (the guest reads up to the first NUL).
func writeFirstBootDisk(path string, data []byte) error {
	if len(data) == 0 {
		return errors.New("no first-boot data")
	}
	for _, b := range data {
		if b == 0 {
			return errors.New("first-boot data holds a NUL byte")
		}
	}
	size := (len(data)/sector + 1) * sector // at least one NUL ends it
	buf := make([]byte, size)
	copy(buf, data)
	return os.WriteFile(path, buf, 0o600)
}
