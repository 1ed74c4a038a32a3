package infer

import (
	"syscall"
	"time"
	"unsafe"
)

// schedIdle is Linux's SCHED_IDLE scheduling policy (sched(7)): a thread
// under it runs only when no thread of another policy wants its core, and
// one that wakes preempts it at once.
const schedIdle = 5

// gettid returns the calling thread's id.
func gettid() int { return syscall.Gettid() }

// setBackground puts thread tid under SCHED_IDLE. Any thread may lower
// the priority of a thread of its own process this way without
// privileges; leaving SCHED_IDLE would need CAP_SYS_NICE or an
// RLIMIT_NICE of 20 (sched(7)), so readerPlan never tries.
func setBackground(tid int) error {
	var param [1]int32 // sched_priority: 0 for SCHED_IDLE
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(tid), schedIdle, uintptr(unsafe.Pointer(&param[0])))
	if e != 0 {
		return e
	}
	return nil
}

// threadCPU returns the CPU time the calling thread has used, or -1 when
// it cannot tell.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil { // RUSAGE_THREAD
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// schedPolicy returns thread tid's scheduling policy (for the tests).
func schedPolicy(tid int) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
