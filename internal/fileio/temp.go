package fileio

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// StaleAfter is how long ago a temporary file of an output must have been
// last written for Create to take it as left behind by a killed process
// and remove it. A live write touches its file far more often than this.
const StaleAfter = 10 * time.Minute

// TempPrefix returns the prefix of the temporary files that Create makes
// for the output at path: "." + its base name + ".tmp", in its directory,
// followed by random digits. A base name too long for that to fit in a
// file name (255 bytes, with the digits) is shortened to its first 200
// bytes, cut at a character, "~" and 16 hex digits of its SHA-256, so
// that every legal output name can be written.
func TempPrefix(path string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, tempBase(base))
}

// maxTempBase is the longest base name whose temporary name "." + base +
// ".tmp" + up to 20 random digits fits in NAME_MAX (255) bytes.
const maxTempBase = 255 - len(".") - len(".tmp") - 20

// tempBase returns the name prefix of the temporary files of an output
// named base: see TempPrefix.
func tempBase(base string) string {
	if len(base) > maxTempBase {
		cut := 200
		for cut > 0 && !utf8.RuneStart(base[cut]) {
			cut--
		}
		h := sha256.Sum256([]byte(base))
		base = base[:cut] + "~" + hex.EncodeToString(h[:8])
	}
	return "." + base + ".tmp"
}

// temps holds the temporary files of the process not yet committed or
// aborted. It is process-wide state by necessity: a signal handler must
// find every one of them.
var temps struct {
	sync.Mutex
	names map[string]struct{}
}

func register(name string) {
	temps.Lock()
	defer temps.Unlock()
	if temps.names == nil {
		temps.names = map[string]struct{}{}
	}
	temps.names[filepath.Clean(name)] = struct{}{}
}

func unregister(name string) {
	temps.Lock()
	defer temps.Unlock()
	delete(temps.names, filepath.Clean(name))
}

// RemoveTemps removes every temporary file of the process that Create made
// and no Commit or Abort has finished, and every temporary directory of a
// WriteDir still running, and returns their names. It is for
// an interrupted process about to exit while a write or a check of one of
// them may still be running: that write then fails.
func RemoveTemps() []string {
	temps.Lock()
	defer temps.Unlock()
	var removed []string
	for name := range temps.names {
		if _, err := os.Lstat(name); err == nil && os.RemoveAll(name) == nil {
			removed = append(removed, name)
		}
		delete(temps.names, name)
	}
	return removed
}

// removeStale removes the temporary files of output base in dir last
// modified more than StaleAfter ago, skipping those of this process. Any
// error is ignored: a stale file left in place is harmless.
func removeStale(dir, base string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := tempBase(base)
	for _, e := range entries {
		digits, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" || !e.Type().IsRegular() {
			continue
		}
		name := filepath.Join(dir, e.Name())
		temps.Lock()
		_, ours := temps.names[name]
		temps.Unlock()
		if fi, err := e.Info(); err == nil && !ours && time.Since(fi.ModTime()) > StaleAfter {
			os.Remove(name)
		}
	}
}
