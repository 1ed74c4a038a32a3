package infer

import (
	"bytes"
	"os"
	"strconv"
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

// clockTick is USER_HZ, the unit of /proc/self/stat's times: 100 on
// every Linux architecture Go supports.
const clockTick = 100

// othersLoad returns the load that other processes put on the machine, in
// cores: the 1-minute load average less this process's average CPU use
// since it started (its own threads count in the load average too). ok
// is false when /proc cannot tell.
func othersLoad() (load float64, ok bool) {
	avg, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, false
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	load1, err1 := strconv.ParseFloat(string(procField(avg, 0)), 64)
	uptime, err2 := strconv.ParseFloat(string(procField(up, 0)), 64)
	// Field 22 of /proc/self/stat, the start time in clock ticks after
	// boot; fields are counted after the command name, which ends with
	// the last ")" and may hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || err1 != nil || err2 != nil {
		return 0, false
	}
	start, err := strconv.ParseFloat(string(procField(stat[i+1:], 19)), 64)
	if err != nil {
		return 0, false
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	return othersFrom(load1, cpu, uptime-start/clockTick), true
}

// procField returns the i-th space-separated field of b (from 0), or nil.
func procField(b []byte, i int) []byte {
	f := bytes.Fields(b)
	if i >= len(f) {
		return nil
	}
	return f[i]
}
