//go:build !linux

package calib

import "time"

// threadCPU returns 0: only Linux reports a thread's CPU time here.
func threadCPU() time.Duration { return 0 }
