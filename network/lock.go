package network

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// lockName is the lock file of a store directory.
const lockName = "LOCK"

// lockStore takes the exclusive lock of the store directory dir — the
// file dir/LOCK, locked with flock, which the operating system releases
// when the process ends however it ends — and writes who holds it there.
// While another process (or another Server of this one) holds it, it
// returns an error wrapping ErrLocked that names the holder. Close the
// file to release it.
func lockStore(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := flock(f); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := strings.TrimSpace(string(bytes.ToValidUTF8(b, nil)))
		if holder == "" {
			holder = "another process"
		}
		return nil, fmt.Errorf("%w: %s is held by %.200s: one coordinator per federation (stop that one, or use another --store)", ErrLocked, dir, holder)
	}
	host, _ := os.Hostname()
	who := fmt.Sprintf("fedcalib serve (pid %d on %s, since %s)\n", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(who), 0)
	}
	return f, nil
}
