package calib

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Parallel row sums. The objectives of the scaling fits are sums over the
// rows of a set of each row's NLL and its gradient. rowSums splits the
// rows into blocks that depend only on the number of rows, sums each
// block into its own accumulator (on as many goroutines as GOMAXPROCS
// allows, each block's rows in order), and adds the blocks' accumulators
// in block order: the result is the same to the bit whatever the number
// of threads.
const (
	// rowSumsBlockRows is the fewest rows of a block: a set of fewer than
	// 2·rowSumsBlockRows rows (a federated client's) is one block, summed
	// in row order on the calling goroutine, as a plain loop would.
	rowSumsBlockRows = 256
	// rowSumsMaxBlocks is the most blocks, and so the most accumulators
	// (each as long as the gradient) a sum keeps.
	rowSumsMaxBlocks = 16
)

// rowSums sums a per-row function and its gradient over n rows in
// parallel, deterministically (see rowSumsBlockRows). Its accumulators
// are kept from one sum to the next, so one rowSums serves every
// evaluation of a fit; it is not safe for concurrent use.
type rowSums struct {
	n, blocks int
	part      [][]float64 // accumulators of blocks 1…; block 0 sums into dst
}

// newRowSums returns the row sums of n rows.
func newRowSums(n int) *rowSums {
	return &rowSums{n: n, blocks: rowSumsBlocks(n)}
}

// rowSumsBlocks returns the number of blocks of n rows.
func rowSumsBlocks(n int) int {
	return min(rowSumsMaxBlocks, max(1, n/rowSumsBlockRows))
}

// sum clears dst, calls f(lo, hi, acc) for each block of rows [lo, hi),
// acc a zeroed accumulator as long as dst (dst itself for the first
// block), and adds the other blocks' accumulators into dst in block
// order. It returns the sum, in block order, of f's values.
func (r *rowSums) sum(dst []float64, f func(lo, hi int, acc []float64) float64) float64 {
	clear(dst)
	if r.blocks == 1 {
		return f(0, r.n, dst)
	}
	if len(r.part) != r.blocks-1 || len(r.part[0]) != len(dst) {
		r.part = make([][]float64, r.blocks-1)
		for b := range r.part {
			r.part[b] = make([]float64, len(dst))
		}
	}
	vals := make([]float64, r.blocks)
	var next atomic.Int64
	workers := min(runtime.GOMAXPROCS(0), r.blocks)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				b := int(next.Add(1)) - 1
				if b >= r.blocks {
					return
				}
				acc := dst
				if b > 0 {
					acc = r.part[b-1]
					clear(acc)
				}
				vals[b] = f(b*r.n/r.blocks, (b+1)*r.n/r.blocks, acc)
			}
		})
	}
	wg.Wait()
	// Each component is added in block order, whichever goroutine adds
	// it: split the components among the workers.
	chunk := (len(dst) + workers - 1) / workers
	for w := range workers {
		wg.Go(func() {
			lo, hi := min(w*chunk, len(dst)), min((w+1)*chunk, len(dst))
			for _, p := range r.part {
				d, q := dst[lo:hi], p[lo:hi]
				for k, v := range q {
					d[k] += v
				}
			}
		})
	}
	wg.Wait()
	var total float64
	for _, v := range vals {
		total += v
	}
	return total
}
