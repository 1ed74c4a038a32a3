// Command evalfloor is the floor of `fedcalib eval`'s CPU time
// (bench/eval.sh): it reads a logits file a block of 4096 rows at a time
// with the reader eval uses (logits.Blocks) on one thread and takes one
// exp per logit, converted to float64, which it sums so that nothing is
// optimised away. Any evaluation must at least read the file and take
// the softmax's exponentials.
//
//	go run ./bench/evalfloor F.npz
package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"

	"github.com/fedcalib/fedcalib/infer/logits"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: evalfloor F.npz")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "evalfloor:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	runtime.GOMAXPROCS(1)
	a, err := logits.Open(path)
	if err != nil {
		return err
	}
	defer a.Close()
	blocks, err := a.Blocks()
	if err != nil {
		return err
	}
	defer blocks.Close()
	var b logits.Block
	var sum float64
	rows := 0
	for {
		err := blocks.Next(&b, 4096)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		for _, v := range b.Logits {
			sum += math.Exp(float64(v))
		}
		rows += b.Len()
	}
	fmt.Printf("{\"rows\": %d, \"sum_exp\": %v}\n", rows, sum)
	return nil
}
