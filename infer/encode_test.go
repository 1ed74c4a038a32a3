package infer

import (
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer/data"
)

// A 2×2 image with 3 channels whose pixel (h, w) channel c holds
// 10*(2h+w) + c, normalised with mean (0, 1, 2) and std (1, 2, 4):
// channel 0 keeps its values, channel 1 becomes (v-1)/2, channel 2 (v-2)/4.
var (
	hwc = []uint8{0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}
	// By hand, channel by channel.
	wantNCHW = []float32{0, 10, 20, 30, 0, 5, 10, 15, 0, 2.5, 5, 7.5}
	// By hand, pixel by pixel.
	wantNHWC = []float32{0, 0, 0, 10, 5, 2.5, 20, 10, 5, 30, 15, 7.5}
)

func TestEncoderLayouts(t *testing.T) {
	pre := Preprocessing{Mean: []float64{0, 1, 2}, Std: []float64{1, 2, 4}}
	flt := make([]float32, len(hwc))
	for i, v := range hwc {
		flt[i] = float32(v)
	}
	// The same values, already in NCHW order, as a flat record.
	chw := []float32{0, 10, 20, 30, 1, 11, 21, 31, 2, 12, 22, 32}
	for _, tc := range []struct {
		name   string
		layout Layout
		dims   []int64
		rec    data.Record
		want   []float32
	}{
		{"image NCHW", NCHW, []int64{3, 2, 2}, data.Record{Image: hwc, Shape: []int{2, 2, 3}}, wantNCHW},
		{"image NHWC", NHWC, []int64{2, 2, 3}, data.Record{Image: hwc, Shape: []int{2, 2, 3}}, wantNHWC},
		{"image NC", NC, []int64{12}, data.Record{Image: hwc, Shape: []int{2, 2, 3}}, wantNHWC},
		{"image dynamic dims", NCHW, []int64{3, -1, -1}, data.Record{Image: hwc, Shape: []int{2, 2, 3}}, wantNCHW},
		{"float NCHW", NCHW, []int64{3, 2, 2}, data.Record{Float: flt, Shape: []int{2, 2, 3}}, wantNCHW},
		{"float NHWC", NHWC, []int64{2, 2, 3}, data.Record{Float: flt, Shape: []int{2, 2, 3}}, wantNHWC},
		{"flat float as NCHW", NCHW, []int64{3, 2, 2}, data.Record{Float: chw}, wantNCHW},
		{"flat float as NHWC", NHWC, []int64{2, 2, 3}, data.Record{Float: flt}, wantNHWC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pre
			p.Layout = tc.layout
			e := newEncoder(p, Float32, "x", tc.dims)
			if err := e.plan(&tc.rec); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, e.size)
			// Twice: the second record reuses the plan.
			for range 2 {
				if err := e.encode(&tc.rec, got, nil); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("encoded %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestEncoderOneChannel(t *testing.T) {
	// scale 1/255, mean 0.5, std 0.25: 0 → -2, 255 → 2, 51 → -1.2.
	pre := Preprocessing{Scale: 1.0 / 255, Mean: []float64{0.5}, Std: []float64{0.25}, Layout: NCHW}
	e := newEncoder(pre, Float32, "x", []int64{1, 1, 3})
	rec := data.Record{Image: []uint8{0, 255, 51}, Shape: []int{1, 3}}
	if err := e.plan(&rec); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 3)
	if err := e.encode(&rec, got, nil); err != nil {
		t.Fatal(err)
	}
	if want := []float32{-2, 2, -1.2}; !slices.Equal(got, want) {
		t.Errorf("encoded %v, want %v", got, want)
	}
}

func TestEncoderInt64(t *testing.T) {
	e := newEncoder(Preprocessing{Layout: NC, DType: Int64}, Int64, "ids", []int64{3})
	rec := data.Record{Float: []float32{4, 0, 7}}
	if err := e.plan(&rec); err != nil {
		t.Fatal(err)
	}
	got := make([]int64, 3)
	if err := e.encode(&rec, nil, got); err != nil {
		t.Fatal(err)
	}
	if want := []int64{4, 0, 7}; !slices.Equal(got, want) {
		t.Errorf("encoded %v, want %v", got, want)
	}
	rec.Float[1] = 0.5
	if err := e.encode(&rec, nil, got); err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Errorf("non-integer value: error %v, want one saying so", err)
	}

	v := newEncoder(Preprocessing{DType: Int64, Vocab: "ab€c"}, Int64, "tokens", []int64{-1})
	text := data.Record{Text: "c€ba"}
	if err := v.plan(&text); err != nil {
		t.Fatal(err)
	}
	got = make([]int64, v.size)
	if err := v.encode(&text, nil, got); err != nil {
		t.Fatal(err)
	}
	if want := []int64{3, 2, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("encoded %q as %v, want %v", text.Text, got, want)
	}
}

func TestEncoderPlanErrors(t *testing.T) {
	img := data.Record{Image: hwc, Shape: []int{2, 2, 3}}
	for _, tc := range []struct {
		name string
		pre  Preprocessing
		dims []int64
		rec  data.Record
		want string
	}{
		{"no layout", Preprocessing{}, []int64{3, 2, 2}, img, "set fedcalib.input.layout (flag --layout)"},
		{"mean per channel", Preprocessing{Layout: NCHW, Mean: []float64{1, 2}}, []int64{3, 2, 2}, img, "fedcalib.input.mean has 2 values but the data has 3 channels"},
		{"rank 4 record", Preprocessing{Layout: NCHW}, []int64{3, 2, 2}, data.Record{Image: hwc, Shape: []int{1, 2, 2, 3}}, "want height×width×channels"},
		{"flat to dynamic", Preprocessing{Layout: NCHW}, []int64{3, -1, -1}, data.Record{Float: make([]float32, 12)}, "flat records of 12 values cannot fill NCHW input"},
		{"no vocab", Preprocessing{DType: Int64}, []int64{-1}, data.Record{Text: "abc"}, "model has no vocabulary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dtype := Float32
			if tc.pre.DType != "" {
				dtype = tc.pre.DType
			}
			err := newEncoder(tc.pre, dtype, "x", tc.dims).plan(&tc.rec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("plan = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func BenchmarkEncodeMNIST(b *testing.B) {
	pre := Preprocessing{Scale: 1.0 / 255, Mean: []float64{0.1307}, Std: []float64{0.3081}, Layout: NCHW}
	e := newEncoder(pre, Float32, "image", []int64{1, 28, 28})
	rec := data.Record{Image: images(1, 784, 9)[0], Shape: []int{28, 28, 1}}
	if err := e.plan(&rec); err != nil {
		b.Fatal(err)
	}
	dst := make([]float32, 784)
	b.SetBytes(784)
	for b.Loop() {
		if err := e.encode(&rec, dst, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEncodeImageReference checks the layout-specific loops of
// encodeImage against reference, the element-at-a-time definition, and
// against the normalisation computed independently from each element's
// channel and pixel, on every layout and on sizes that are not multiples
// of the 8 pixels lutBytes takes at a time.
func TestEncodeImageReference(t *testing.T) {
	pre := func(layout Layout, c int) Preprocessing {
		p := Preprocessing{Scale: 1.0 / 255, Layout: layout}
		for ch := range c {
			p.Mean = append(p.Mean, 0.1+0.2*float64(ch))
			p.Std = append(p.Std, 0.3+0.1*float64(ch))
		}
		return p
	}
	for _, tc := range []struct {
		name   string
		layout Layout
		shape  []int   // record shape
		dims   []int64 // model input dims
		path   string  // the loop encodeImage takes
		// chanPix gives element i's channel and the index of its pixel in
		// the record, derived from the layout by hand.
		chanPix func(i int) (int, int)
	}{
		{"MNIST NCHW", NCHW, []int{28, 28, 1}, []int64{1, 28, 28}, "lutBytes", func(i int) (int, int) { return 0, i }},
		{"gray 5x3 NHWC", NHWC, []int{5, 3}, []int64{5, 3, 1}, "lutBytes", func(i int) (int, int) { return 0, i }},
		{"gray flat 13", NC, []int{13}, []int64{13}, "lutBytes", func(i int) (int, int) { return 0, i }},
		{"RGB 4x5 NCHW", NCHW, []int{4, 5, 3}, []int64{3, 4, 5}, "planar", func(i int) (int, int) { return i / 20, (i%20)*3 + i/20 }},
		{"RGB 4x5 NHWC", NHWC, []int{4, 5, 3}, []int64{4, 5, 3}, "interleaved", func(i int) (int, int) { return i % 3, i }},
		{"RGB 4x5 NC", NC, []int{4, 5, 3}, []int64{60}, "interleaved", func(i int) (int, int) { return i % 3, i }},
		{"RGBA 3x3 NCHW", NCHW, []int{3, 3, 4}, []int64{4, 3, 3}, "planar", func(i int) (int, int) { return i / 9, (i%9)*4 + i/9 }},
		{"flat CHW into NCHW", NCHW, []int{12}, []int64{3, 2, 2}, "reference", func(i int) (int, int) { return i / 4, i }},
		{"flat HWC into NHWC", NHWC, []int{12}, []int64{2, 2, 3}, "interleaved", func(i int) (int, int) { return i % 3, i }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := 1
			if len(tc.shape) == 3 {
				c = tc.shape[2]
			}
			if tc.layout != NC && len(tc.shape) == 1 {
				c = int(tc.dims[0])
				if tc.layout == NHWC {
					c = int(tc.dims[2])
				}
			}
			p := pre(tc.layout, c)
			e := newEncoder(p, Float32, "x", tc.dims)
			n := prod(tc.shape)
			rec := data.Record{Image: images(1, n, 5)[0], Shape: tc.shape}
			rec.Image[0], rec.Image[n-1] = 0, 255 // both ends of the table
			if err := e.plan(&rec); err != nil {
				t.Fatal(err)
			}
			path := "reference"
			switch {
			case e.chans == 1:
				path = "lutBytes"
			case e.planar:
				path = "planar"
			case e.interleaved:
				path = "interleaved"
			}
			if path != tc.path {
				t.Errorf("encodeImage takes the %s loop, want %s", path, tc.path)
			}
			got := make([]float32, n)
			if err := e.encode(&rec, got, nil); err != nil {
				t.Fatal(err)
			}
			ref := make([]float32, n)
			reference(e, ref, rec.Image)
			for i := range n {
				ch, pix := tc.chanPix(i)
				v := float64(rec.Image[pix])
				want := float32((v*p.Scale - p.Mean[ch]) / p.Std[ch])
				if got[i] != want || ref[i] != want {
					t.Fatalf("element %d (channel %d, pixel %d = %v): encoded %v, reference %v, want %v", i, ch, pix, v, got[i], ref[i], want)
				}
			}
		})
	}
}
