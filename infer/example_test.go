package infer_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fedcalib/fedcalib/infer"
	"github.com/fedcalib/fedcalib/infer/data"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// Run a model over the MNIST test set and save the logits. (Not run as a
// test: it needs the data set.)
func ExampleSession_Infer() {
	s, err := infer.OpenSession("mnist_cnn.onnx", infer.Options{Batch: 512})
	if err != nil {
		log.Fatal(err) // e.g. "ONNX Runtime not found: run `make setup` ..."
	}
	defer s.Close()
	rd, err := data.Open("mnist:data/mnist:test")
	if err != nil {
		log.Fatal(err)
	}
	defer rd.Close()
	res, err := s.Infer(context.Background(), rd)
	if err != nil {
		log.Fatal(err)
	}
	if err := logits.Write("mnist_test.npz", res.File()); err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Len(), "records,", res.Classes, "classes")
}

// Override the preprocessing of a model that records none, as the infer
// command's --layout, --scale, --mean and --std flags do.
func ExampleOptions_preprocess() {
	opt := infer.Options{Preprocess: map[string]string{
		infer.KeyLayout: "NCHW",
		infer.KeyScale:  "0.00392156862745098",
		infer.KeyMean:   "0.4914,0.4822,0.4465",
		infer.KeyStd:    "0.2470,0.2435,0.2616",
	}}
	p, err := infer.ParsePreprocessing(opt.Preprocess)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Layout, len(p.Mean), "channels")
	// Output: NCHW 3 channels
}
