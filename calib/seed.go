package calib

import (
	"fmt"
	"strconv"
)

// Seed is a random seed as a calibrator file records it: an unsigned
// 64-bit integer, the type of every seed of fedcalib (the --seed flags,
// federation.Rounds.Seed, experiment grids). It is written as a JSON
// number.
//
// Files written before seeds were unsigned may record a negative seed
// (fedcalib calibrate --seed -1). Such a seed reads as the unsigned seed
// with the same bits, uint64(int64(s)), which is the seed the random
// generators were given, so an old file still names its run.
type Seed uint64

// UnmarshalJSON reads a seed from a JSON integer in [−2^63, 2^64).
func (s *Seed) UnmarshalJSON(b []byte) error {
	str := string(b)
	if str == "null" {
		return nil
	}
	if u, err := strconv.ParseUint(str, 10, 64); err == nil {
		*s = Seed(u)
		return nil
	}
	i, err := strconv.ParseInt(str, 10, 64)
	if err != nil {
		return fmt.Errorf("seed %s: want an integer from 0 to %d", str, uint64(1<<64-1))
	}
	*s = Seed(uint64(i)) // an old signed seed: the same bits
	return nil
}
