package calib

import (
	"math/bits"
	"slices"
)

func oldSortPackedInto(buf []uint64, segs ...[]uint64) []uint64 {
	const topBits = 12 // 4096 buckets: their open cache lines fit in L2
	n := 0
	for _, seg := range segs {
		n += len(seg)
	}
	if n < 1024 {
		var s []uint64
		if len(segs) == 1 {
			s = segs[0]
		} else {
			s = slices.Concat(segs...)
		}
		slices.Sort(s)
		return s
	}
	lo, hi := ^uint64(0), uint64(0)
	for _, seg := range segs {
		for _, u := range seg {
			lo, hi = min(lo, u), max(hi, u)
		}
	}
	shift := uint(max(0, bits.Len64(lo^hi)-topBits))
	var count [1<<topBits + 1]int
	for _, seg := range segs {
		for _, u := range seg {
			count[1+int(u>>shift)&(1<<topBits-1)]++
		}
	}
	largest := 0
	for b := 1; b < len(count); b++ {
		largest = max(largest, count[b])
		count[b] += count[b-1]
	}
	var next [1 << topBits]int
	copy(next[:], count[:1<<topBits])
	dst := buf
	if cap(dst) < n {
		dst = make([]uint64, n)
	}
	dst = dst[:n]
	for _, seg := range segs {
		for _, u := range seg {
			b := int(u>>shift) & (1<<topBits - 1)
			dst[next[b]] = u
			next[b]++
		}
	}
	if lo == hi {
		return dst
	}
	scratch := make([]uint64, largest)
	for b := range 1 << topBits {
		if count[b+1]-count[b] > 1 {
			oldSortBucket(dst[count[b]:count[b+1]], scratch)
		}
	}
	return dst
}

// oldSortBucket sorts s in place, using scratch (at least len(s) long): by
// insertion for a few keys, else by one radix pass on the 8 bits below
// those its keys share, into scratch and back, and the same for each
// bucket of that pass.
func oldSortBucket(s, scratch []uint64) {
	if len(s) <= 32 {
		for i := 1; i < len(s); i++ {
			u := s[i]
			j := i
			for ; j > 0 && s[j-1] > u; j-- {
				s[j] = s[j-1]
			}
			s[j] = u
		}
		return
	}
	lo, hi := s[0], s[0]
	for _, u := range s[1:] {
		lo, hi = min(lo, u), max(hi, u)
	}
	if lo == hi {
		return
	}
	shift := uint(max(0, bits.Len64(lo^hi)-8))
	var count [257]int
	for _, u := range s {
		count[1+int(u>>shift)&0xff]++
	}
	for b := 1; b < len(count); b++ {
		count[b] += count[b-1]
	}
	next := count
	t := scratch[:len(s)]
	for _, u := range s {
		b := int(u>>shift) & 0xff
		t[next[b]] = u
		next[b]++
	}
	copy(s, t)
	for b := range 256 {
		if count[b+1]-count[b] > 1 {
			oldSortBucket(s[count[b]:count[b+1]], scratch)
		}
	}
}
