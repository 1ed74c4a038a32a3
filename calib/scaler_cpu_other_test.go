//go:build !unix

package calib

import "time"

// scCPUTime returns 0 where the process CPU time is not available.
func scCPUTime() time.Duration { return 0 }
