package secagg_test

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time of the calling OS thread (RUSAGE_THREAD),
// for benchmarks on a loaded machine; the caller locks its OS thread.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(1, &ru) != nil { // 1 = RUSAGE_THREAD
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
