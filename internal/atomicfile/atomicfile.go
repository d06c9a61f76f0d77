// Package atomicfile replaces a file so that a reader, a crash or a power
// loss sees either the old contents or the new, never a mix: the new
// contents go to a temporary file in the same directory, which is fsynced,
// renamed over the old, and the directory fsynced so the rename itself is
// durable. Every file the Manager, its workers and its tools keep outside
// the raft store is written through it.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, with mode perm.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write replaces path with what write writes, with mode perm. When write
// (or any step) fails, path is untouched and the temporary file removed.
func Write(path string, perm os.FileMode, write func(io.Writer) error) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := write(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Commit()
}

// File is a replacement of a file being written: its contents are
// invisible at the path until Commit. Use it where the contents must be
// checked before they replace the old (read them back through File).
// A File is not safe for concurrent use.
type File struct {
	*os.File
	path string
	done bool
}

// Create starts a replacement of path with mode perm.
func Create(path string, perm os.FileMode) (*File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &File{File: f, path: path}, nil
}

// Commit fsyncs the contents, renames them over the path and fsyncs the
// directory. After a failed Commit the path is untouched.
func (f *File) Commit() error {
	if f.done {
		return errors.New("atomicfile: Commit after Commit or Abort")
	}
	f.done = true
	tmp := f.Name()
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	if err := SyncDir(filepath.Dir(f.path)); err != nil {
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	return nil
}

// Abort discards the replacement; after Commit it does nothing, so it may
// be deferred.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	_ = f.Close()
	_ = os.Remove(f.Name())
}

// SyncDir fsyncs a directory, so that a rename, creation or removal in it
// survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
