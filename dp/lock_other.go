//go:build !unix

package dp

import (
	"errors"
	"os"
)

// lockFile reports that ledger files cannot be locked here: without a
// lock, concurrent runs could both spend the last of a budget.
func lockFile(path string) (*os.File, error) {
	return nil, errors.New("privacy ledgers need flock(2), which this platform lacks")
}

// unlockFile closes f.
func unlockFile(path string, f *os.File) { f.Close() }

// linkCount returns 1: hard links are not counted here.
func linkCount(os.FileInfo) uint64 { return 1 }
