package calib

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time the calling thread has used (user and
// system), for benchmarks that lock their goroutine to its thread.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
