package infer

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"testing"

	"github.com/fedcalib/fedcalib/infer/data"
)

// This file holds the test fixtures: an in-memory data.Reader and plain-Go
// computations of the networks in testdata (see testdata/gen_tiny.py),
// written independently of the package code, in float64.

// sliceReader is a data.Reader over records in memory.
type sliceReader struct {
	recs    []data.Record
	classes []string
	i       int
	err     error // returned instead of the record at index failAt
	failAt  int
}

func (r *sliceReader) Next(rec *data.Record) error {
	if r.err != nil && r.i == r.failAt {
		return r.err
	}
	if r.i == len(r.recs) {
		return io.EOF
	}
	*rec = r.recs[r.i]
	r.i++
	return nil
}

func (r *sliceReader) Classes() []string { return r.classes }
func (r *sliceReader) Close() error      { return nil }

// requireRuntime loads ONNX Runtime or skips the test.
func requireRuntime(tb testing.TB) {
	tb.Helper()
	if _, err := InitRuntime(""); err != nil {
		if errors.Is(err, ErrRuntimeNotFound) {
			tb.Skipf("skipping: %v", err)
		}
		tb.Fatal(err)
	}
}

// tinyWeights is testdata/tiny.json.
type tinyWeights struct {
	Tiny struct {
		Scale, Mean, Std float64
		W1, B1, W2, B2   []float64
		Hidden, Classes  int
	}
	Text struct {
		Vocab       string
		Dim, Length int
		Emb, W, B   []float64
		Classes     int
	}
}

func loadTinyWeights(tb testing.TB) *tinyWeights {
	tb.Helper()
	b, err := os.ReadFile("testdata/tiny.json")
	if err != nil {
		tb.Fatal(err)
	}
	var w tinyWeights
	if err := json.Unmarshal(b, &w); err != nil {
		tb.Fatal(err)
	}
	return &w
}

// dense returns W x + b for W of len(b) rows.
func dense(w, b, x []float64) []float64 {
	y := make([]float64, len(b))
	for i := range y {
		s := b[i]
		for j, v := range x {
			s += w[i*len(x)+j] * v
		}
		y[i] = s
	}
	return y
}

func relu(x []float64) []float64 {
	for i, v := range x {
		x[i] = math.Max(v, 0)
	}
	return x
}

// tinyLogits computes tiny.onnx on a 4×4 one-channel image.
func (w *tinyWeights) tinyLogits(img []uint8) []float64 {
	t := &w.Tiny
	x := make([]float64, len(img))
	for i, v := range img {
		x[i] = (float64(v)*t.Scale - t.Mean) / t.Std
	}
	return dense(t.W2, t.B2, relu(dense(t.W1, t.B1, x)))
}

// textLogits computes tiny_text.onnx on a string.
func (w *tinyWeights) textLogits(s string) []float64 {
	t := &w.Text
	idx := map[rune]int{}
	for i, c := range []rune(t.Vocab) {
		idx[c] = i
	}
	m := make([]float64, t.Dim)
	n := 0
	for _, c := range s {
		for d := range m {
			m[d] += t.Emb[idx[c]*t.Dim+d]
		}
		n++
	}
	for d := range m {
		m[d] /= float64(n)
	}
	return dense(t.W, t.B, m)
}

// cnnWeight repeats gen_tiny.py's cnn_weight: element i of parameter
// tensor k is ((i*7919 + k*104729) mod 2001 - 1000) / 1000 / sqrt(fanIn),
// rounded to float32.
func cnnWeight(k, n, fanIn int) []float64 {
	w := make([]float64, n)
	for i := range w {
		m := (int64(i)*7919 + int64(k)*104729) % 2001
		w[i] = float64(float32((float64(m-1000) / 1000.0) / math.Sqrt(float64(fanIn))))
	}
	return w
}

// cnnRef is cnn.onnx computed by hand.
type cnnRef struct{ c1w, c1b, c2w, c2b, fw, fb []float64 }

func newCNNRef() *cnnRef {
	return &cnnRef{
		c1w: cnnWeight(0, 32*1*9, 9), c1b: cnnWeight(1, 32, 9),
		c2w: cnnWeight(2, 64*32*9, 288), c2b: cnnWeight(3, 64, 288),
		fw: cnnWeight(4, 10*64, 64), fb: cnnWeight(5, 10, 64),
	}
}

// conv3 is a 3×3 convolution of x [cin,h,w] with zero padding 1, giving
// [len(b),h,w].
func conv3(x []float64, cin, h, w int, k, b []float64) []float64 {
	cout := len(b)
	y := make([]float64, cout*h*w)
	for o := range cout {
		for i := range h {
			for j := range w {
				s := b[o]
				for c := range cin {
					for di := -1; di <= 1; di++ {
						for dj := -1; dj <= 1; dj++ {
							if i+di < 0 || i+di >= h || j+dj < 0 || j+dj >= w {
								continue
							}
							s += k[((o*cin+c)*3+di+1)*3+dj+1] * x[(c*h+i+di)*w+j+dj]
						}
					}
				}
				y[(o*h+i)*w+j] = s
			}
		}
	}
	return y
}

// pool2 is a 2×2 max pool with stride 2 of x [c,h,w].
func pool2(x []float64, c, h, w int) []float64 {
	oh, ow := h/2, w/2
	y := make([]float64, c*oh*ow)
	for ch := range c {
		for i := range oh {
			for j := range ow {
				m := math.Inf(-1)
				for di := range 2 {
					for dj := range 2 {
						m = math.Max(m, x[(ch*h+2*i+di)*w+2*j+dj])
					}
				}
				y[(ch*oh+i)*ow+j] = m
			}
		}
	}
	return y
}

// logits computes cnn.onnx on a 28×28 one-channel image.
func (r *cnnRef) logits(img []uint8) []float64 {
	x := make([]float64, len(img))
	for i, v := range img {
		x[i] = (float64(v)/255 - 0.1307) / 0.3081
	}
	a := pool2(relu(conv3(x, 1, 28, 28, r.c1w, r.c1b)), 32, 28, 28)
	a = pool2(relu(conv3(a, 32, 14, 14, r.c2w, r.c2b)), 64, 14, 14)
	g := make([]float64, 64) // global average pool over 7×7
	for c := range g {
		for _, v := range a[c*49 : (c+1)*49] {
			g[c] += v
		}
		g[c] /= 49
	}
	return dense(r.fw, r.fb, g)
}

// images returns n deterministic pseudo-random images of size bytes.
func images(n, size int, seed uint32) [][]uint8 {
	out := make([][]uint8, n)
	x := seed*2654435761 + 1
	for i := range out {
		out[i] = make([]uint8, size)
		for j := range out[i] {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			out[i][j] = uint8(x >> 24)
		}
	}
	return out
}

// closeTo reports whether got matches want to within 1e-5, relative to
// the larger of 1 and |want|.
func closeTo(got float32, want float64) bool {
	return math.Abs(float64(got)-want) <= 1e-5*math.Max(1, math.Abs(want))
}
