package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// seedValue is the pflag.Value of every --seed flag: an unsigned 64-bit
// integer, the type of every seed of fedcalib (federation.Rounds.Seed,
// experiment grids, calib.Seed in calibrator files). It refuses negative
// seeds with a message saying so, where pflag's own Uint64 would show a
// strconv error.
type seedValue uint64

// Set parses a seed, decimal or with a 0x, 0o or 0b prefix.
func (s *seedValue) Set(v string) error {
	u, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		if strings.HasPrefix(strings.TrimSpace(v), "-") {
			return fmt.Errorf("seeds are unsigned: want an integer from 0 to %d", uint64(math.MaxUint64))
		}
		return fmt.Errorf("want an integer from 0 to %d", uint64(math.MaxUint64))
	}
	*s = seedValue(u)
	return nil
}

func (s *seedValue) String() string { return strconv.FormatUint(uint64(*s), 10) }

// Type names the value in flag help, as pflag's Uint64 does.
func (s *seedValue) Type() string { return "uint64" }
