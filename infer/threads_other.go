//go:build !linux

package infer

import (
	"errors"
	"time"
)

// schedIdle stands for Linux's SCHED_IDLE policy.
const schedIdle = 5

func gettid() int { return 0 }

// setBackground is not supported outside Linux: the reader keeps normal
// priority.
func setBackground(tid int) error { return errors.ErrUnsupported }

// threadCPU cannot tell outside Linux.
func threadCPU() time.Duration { return -1 }

// schedPolicy is not supported outside Linux.
func schedPolicy(tid int) (int, error) { return 0, errors.ErrUnsupported }

// othersLoad cannot tell outside Linux.
func othersLoad() (float64, bool) { return 0, false }
