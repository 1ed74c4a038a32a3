//go:build unix

package dp

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock(2) lock on the lock file at path,
// creating it, and waits while another process holds it. The holder
// removes the file before it lets go (unlockFile), so a waiter may wake
// holding a file no longer at path: it then starts again on the file now
// there. The lock is therefore the file at path, one at a time, and no
// lock file outlives its holder.
func lockFile(path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err
		}
		for {
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		held, err1 := f.Stat()
		there, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, there) {
			return f, nil
		}
		f.Close() // removed by its last holder: take the one there now
	}
}

// unlockFile removes the lock file path while still holding its lock,
// then releases the lock and closes f.
func unlockFile(path string, f *os.File) {
	os.Remove(path)
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}

// linkCount returns the number of hard links of the file fi describes.
func linkCount(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
