package logits_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/fedcalib/fedcalib/infer/logits"
)

func Example() {
	dir, err := os.MkdirTemp("", "logits")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "logits.npz")

	f := &logits.File{
		Logits:  []float32{2, -1, 0.5, 0.5, -3, 4},
		Labels:  []int32{0, 1, 1},
		Split:   []uint8{logits.SplitCalibration, logits.SplitTest, logits.SplitTest},
		Classes: 2,
	}
	if err := logits.Write(path, f); err != nil {
		log.Fatal(err)
	}
	g, err := logits.Read(path)
	if err != nil {
		log.Fatal(err)
	}
	test := g.Set(g.Rows(logits.SplitTest))
	fmt.Println(test.Len(), test.Classes, test.Logits, test.Labels)
	// Output: 2 2 [0.5 0.5 -3 4] [1 1]
}
