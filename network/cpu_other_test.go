//go:build !unix

package network

import "time"

// processCPU is 0 where getrusage is missing: TestScale then reports no
// CPU per update.
func processCPU() time.Duration { return 0 }
