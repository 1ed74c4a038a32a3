package fileio

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is returned (wrapped) by ReadLimited and LimitReader for an
// input larger than the bound set for it.
var ErrTooLarge = errors.New("too large")

// ErrNotRegular is returned (wrapped) by ReadLimited and CheckRegular for
// a path that names no regular file: a device such as /dev/zero, a FIFO,
// a socket or a directory, which may never end or block forever.
var ErrNotRegular = errors.New("is not a regular file")

// CheckRegular returns an error wrapping ErrNotRegular when fi, the file
// at path, is not a regular file.
func CheckRegular(path string, fi os.FileInfo) error {
	switch {
	case fi.IsDir():
		return fmt.Errorf("%s is a directory, %w: name a file", path, ErrNotRegular)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s %w (a device, a pipe or a socket, %v): name a file", path, ErrNotRegular, fi.Mode().Type())
	}
	return nil
}

// ReadLimited reads the whole regular file at path, refusing, before
// reading anything, a file that is not regular (CheckRegular: a device
// such as /dev/zero or a FIFO could be endless) and one of more than
// limit bytes (an error wrapping ErrTooLarge). A file that grows while it
// is read is read up to limit+1 bytes and refused too, so it costs limit
// bytes at most.
func ReadLimited(path string, limit int64) ([]byte, error) {
	// Stat, not open, first: opening a FIFO waits for a writer.
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if err := CheckRegular(path, fi); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := CheckRegular(path, fi); err != nil {
		return nil, err
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, more than the %d this reader accepts", path, ErrTooLarge, fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: %w: more than the %d bytes this reader accepts", path, ErrTooLarge, limit)
	}
	return b, nil
}
