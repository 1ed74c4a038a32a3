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

// ReadLimited reads the whole file at path, refusing it with an error
// wrapping ErrTooLarge once it holds more than limit bytes. A regular
// file is checked by its size before anything is read; anything else (a
// device such as /dev/zero, a FIFO, a process substitution) is read up to
// limit+1 bytes, so an endless input costs limit bytes at most. A
// directory is refused.
func ReadLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory: name a file", path)
	}
	if fi.Mode().IsRegular() && fi.Size() > limit {
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
