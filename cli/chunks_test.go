package cli

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// chunkFile returns a logits file of n rows and c overconfident classes
// with a random split column, large enough for several chunks.
func chunkFile(n, c int) *logits.File {
	rng := rand.New(rand.NewPCG(3, 4))
	f := &logits.File{Classes: c, Logits: make([]float32, n*c), Labels: make([]int32, n), Split: make([]uint8, n)}
	for i := range n {
		y := rng.IntN(c)
		for j := range c {
			v := 3 * rng.NormFloat64()
			if j == y {
				v += 4
			}
			f.Logits[i*c+j] = float32(v)
		}
		f.Labels[i] = int32(y)
		f.Split[i] = uint8(rng.IntN(3))
	}
	return f
}

// selections returns the selections the tests cover, with the rows each
// selects in the order measure and setOf read them.
func selections(f *logits.File) map[string]struct {
	sel  rowSel
	rows []int
} {
	list := f.Rows(logits.SplitTest)
	slices.Reverse(list) // any order
	list = append(list, 7, 7)
	return map[string]struct {
		sel  rowSel
		rows []int
	}{
		"all":         {selectSplit(logits.AllRows), f.Rows(logits.AllRows)},
		"calibration": {selectSplit(logits.SplitCalibration), f.Rows(logits.SplitCalibration)},
		"test":        {selectSplit(logits.SplitTest), f.Rows(logits.SplitTest)},
		"list":        {selectRows(list), list},
		"one row":     {selectRows([]int{3}), []int{3}},
	}
}

// TestMeasureEqualsEvaluate checks that metrics and reliability diagrams
// computed in chunks on several goroutines equal those of the whole
// selection converted at once, bit for bit, for every method of the
// registry.
func TestMeasureEqualsEvaluate(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	const c = 5
	f := chunkFile(3*evalChunk+17, c)
	fitSet := f.Set(f.Rows(logits.SplitCalibration)[:400])
	cals := []calib.Calibrator{nil}
	for _, name := range calib.MethodNames() {
		cal, err := calib.New(name, calib.Settings{Mexp: 4, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := cal.Fit(fitSet); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cals = append(cals, cal)
	}
	for name, tc := range selections(f) {
		for _, bins := range []int{0, 7} {
			accs, err := measure(context.Background(), f, tc.sel, cals, bins)
			if err != nil {
				t.Fatal(err)
			}
			s := f.Set(tc.rows)
			for a, cal := range cals {
				method := "uncalibrated"
				if cal != nil {
					method = cal.Method()
				}
				want, err := calib.EvaluateSet(s, cal, bins)
				if err != nil {
					t.Fatal(err)
				}
				got, err := accs[a].Metrics()
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("%s, %d bins, %s: chunked %+v, whole %+v", name, bins, method, got, want)
				}
				p, err := calib.Probabilities(s, cal)
				if err != nil {
					t.Fatal(err)
				}
				rel, err := calib.NewReliability(p, s.Labels, c, bins)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(accs[a].Reliability(), rel) {
					t.Errorf("%s, %d bins, %s: reliability diagrams differ", name, bins, method)
				}
			}
		}
	}
}

// TestSetOf checks that setOf converts the rows a selection names, in
// order, as File.Set does.
func TestSetOf(t *testing.T) {
	f := chunkFile(2*evalChunk+5, 3)
	for name, tc := range selections(f) {
		got, want := setOf(f, tc.sel), f.Set(tc.rows)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %d rows differ from File.Set's %d", name, got.Len(), want.Len())
		}
		if n := tc.sel.count(f); n != len(tc.rows) {
			t.Errorf("%s: count %d, want %d", name, n, len(tc.rows))
		}
	}
}

// TestFitCentralBinning checks that binning calibrators fitted from
// histograms accumulated in chunks equal those that Fit makes from the
// whole set.
func TestFitCentralBinning(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	f := chunkFile(3*evalChunk+17, 4)
	for _, method := range []string{calib.MethodBin, calib.MethodBBQ, calib.MethodIsotonic} {
		for _, mexp := range []int{1, 4, 7} {
			for _, split := range []int{logits.AllRows, logits.SplitCalibration} {
				m, err := calib.LookupMethod(method)
				if err != nil {
					t.Fatal(err)
				}
				got, err := fitCentral(context.Background(), f, selectSplit(split), m, &calibrateFlags{binsExp: mexp})
				if err != nil {
					t.Fatal(err)
				}
				want, err := calib.New(method, calib.Settings{Mexp: mexp})
				if err != nil {
					t.Fatal(err)
				}
				if err := want.Fit(f.Set(f.Rows(split))); err != nil {
					t.Fatal(err)
				}
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				if string(g) != string(w) {
					t.Errorf("%s, M = %d, split %d: chunked fit\n%s\nFit\n%s", method, mexp, split, g, w)
				}
			}
		}
	}
}

// TestForChunksErrors checks that eachChunk stops with fn's first error,
// naming the chunk's rows, and with the context's error.
func TestForChunksErrors(t *testing.T) {
	f := chunkFile(3*evalChunk, 3)
	boom := errors.New("boom")
	err := eachChunk(context.Background(), newFileChunks(f, selectSplit(logits.AllRows)), func(_ int, s *calib.Set) error {
		if s.Labels[0] == f.Label(evalChunk) && s.Logits[0] == float64(f.Logits[3*evalChunk]) {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "rows 4096 to 8191") {
		t.Errorf("error %v, want boom on rows 4096 to 8191", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := measure(ctx, f, selectSplit(logits.AllRows), []calib.Calibrator{nil}, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: error %v, want context.Canceled", err)
	}
	wrong := calib.NewTemperature(4)
	if _, err := measure(context.Background(), f, selectSplit(logits.AllRows), []calib.Calibrator{wrong}, 0); err == nil ||
		err.Error() != "temp calibrator is for 4 classes but the data has 3" {
		t.Errorf("wrong classes: error %v", err)
	}
}

// TestStreamedEqualsWhole checks that eval's input read a block at a time
// (logits.Blocks) measures what the file read whole measures, bit for
// bit, for every split, with logits and with probabilities as input.
func TestStreamedEqualsWhole(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	const c = 5
	f := chunkFile(3*evalChunk+17, c)
	probs := &logits.File{Classes: c, Labels: f.Labels, Split: f.Split, Logits: make([]float32, len(f.Logits))}
	p64 := make([]float64, c)
	for i := range f.Len() {
		z := make([]float64, c)
		f.Row(z, i)
		calib.SoftmaxRows(p64, z, c)
		for j, v := range p64 {
			probs.Logits[i*c+j] = float32(v)
		}
	}
	dir := t.TempDir()
	paths := map[inputKind]string{logits.InputLogits: dir + "/logits.npz", logits.InputProbabilities: dir + "/probs.npz"}
	if err := logits.Write(paths[logits.InputLogits], f); err != nil {
		t.Fatal(err)
	}
	if err := logits.Write(paths[logits.InputProbabilities], probs); err != nil {
		t.Fatal(err)
	}
	temp := calib.NewTemperature(c)
	if err := temp.Fit(f.Set(f.Rows(logits.SplitCalibration))); err != nil {
		t.Fatal(err)
	}
	cals := []calib.Calibrator{nil, temp}
	for input, path := range paths {
		for _, split := range []string{"", "all", "test", "calibration"} {
			var got [2][]*calib.Accumulator
			var cws [4][]calib.Classwise
			for k, whole := range []bool{false, true, false, true} {
				in, err := openEvalInput(context.Background(), path, input, "", split, whole)
				if err != nil {
					t.Fatal(err)
				}
				if k >= 2 { // one class a pass: every class in a pass of its own
					in.keepBytes = (8*int64(in.rows) + 128) * int64(len(cals))
				}
				m, err := in.measure(context.Background(), cals, 0, true)
				if err != nil {
					t.Fatal(err)
				}
				cws[k] = m.classwise
				if k < 2 {
					got[k] = m.accs
				}
				if err := in.close(); err != nil {
					t.Fatal(err)
				}
			}
			// The classwise equal-mass errors: the same streamed or whole,
			// in one pass or one a class, and as calib computes them from
			// the selection's probabilities.
			in, _ := openEvalInput(context.Background(), path, input, "", split, true)
			s := setOf(in.f, in.sel)
			in.close()
			for a, cal := range cals {
				p, err := calib.Probabilities(s, cal)
				if err != nil {
					t.Fatal(err)
				}
				want, err := calib.ClasswiseErrors(p, s.Labels, c, 0)
				if err != nil {
					t.Fatal(err)
				}
				for k := range cws {
					if cws[k][a] != want || want.AdaptiveCWECE == 0 {
						t.Errorf("%s, split %q, calibrator %d, way %d: classwise %+v, want %+v", input, split, a, k, cws[k][a], want)
					}
				}
			}
			for a := range cals {
				streamed, err := got[0][a].Metrics()
				if err != nil {
					t.Fatal(err)
				}
				whole, err := got[1][a].Metrics()
				if err != nil {
					t.Fatal(err)
				}
				if streamed != whole || streamed.N == 0 || !reflect.DeepEqual(got[0][a].Reliability(), got[1][a].Reliability()) {
					t.Errorf("%s, split %q, calibrator %d: streamed %+v, whole %+v", input, split, a, streamed, whole)
				}
			}
		}
	}
}
