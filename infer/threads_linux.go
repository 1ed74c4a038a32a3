package infer

import "syscall"

// backgroundNice is the nice value of a reader at background priority:
// the lowest priority of Linux's normal policy, a weight of 15 against
// 1,024 at nice 0, so that a thread at nice 0 that wakes preempts it and
// it gets about 1.5% of a core that one wants, yet it is never starved
// outright as a SCHED_IDLE thread is on a saturated machine.
const backgroundNice = 19

// gettid returns the calling thread's id.
func gettid() int { return syscall.Gettid() }

// setBackground puts thread tid at nice backgroundNice. Any thread may
// lower the priority of a thread of its own process without privileges;
// raising it back would need CAP_SYS_NICE or RLIMIT_NICE (setpriority(2)),
// so readerPlan never does.
func setBackground(tid int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, tid, backgroundNice)
}

// threadNice returns thread tid's nice value (for the tests).
func threadNice(tid int) (int, error) {
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	return 20 - p, err // the system call returns 20 - nice
}
