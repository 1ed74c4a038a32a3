//go:build unix

package network

import (
	"os"
	"syscall"
)

// flock locks f exclusively, without waiting.
func flock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
