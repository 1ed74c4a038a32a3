package infer

import (
	"context"
	"reflect"
	"runtime"
	"testing"

	ort "github.com/yalue/onnxruntime_go"
)

// TestThreadPlan checks the session options the thread plan sets: pool
// threads sleep unless Spin asks them to spin, for intra- and inter-op
// pools alike.
func TestThreadPlan(t *testing.T) {
	requireRuntime(t)
	for _, tc := range []struct {
		plan threadPlan
		want string // both spinning entries
	}{
		{threadPlan{}, "0"},
		{threadPlan{threads: 1}, "0"},
		{threadPlan{threads: 3, spin: true}, "1"},
	} {
		so, err := ort.NewSessionOptions()
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.plan.apply(so); err != nil {
			t.Fatalf("%+v: %v", tc.plan, err)
		}
		for _, k := range []string{intraSpinKey, interSpinKey} {
			if got, err := so.GetSessionConfigEntry(k); err != nil || got != tc.want {
				t.Errorf("%+v: %s = %q (%v), want %q", tc.plan, k, got, err, tc.want)
			}
		}
		so.Destroy()
	}
}

// TestDefaultThreads checks that the default follows GOMAXPROCS (the
// cores the process may use), not the machine's CPU count.
func TestDefaultThreads(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if got := DefaultThreads(); got != 1 {
		t.Errorf("DefaultThreads() = %d under GOMAXPROCS 1, want 1", got)
	}
}

// TestThreadPlanSameLogits checks that the thread plan changes the speed,
// not the result: every combination of threads, spinning and reading
// ahead gives the logits of one thread reading between runs, bit for bit.
func TestThreadPlanSameLogits(t *testing.T) {
	imgs := images(37, 16, 5)
	recs := imageRecords(imgs, 4, 4, 1)
	var want *Result
	for _, opt := range []Options{
		{Threads: 1, Sequential: true},
		{Threads: 1},
		{Threads: 2, Spin: true},
		{Threads: 2, Spin: true, Sequential: true},
		{},
	} {
		opt.Batch = 8
		s := openTest(t, "testdata/tiny.onnx", opt)
		res, err := s.Infer(context.Background(), &sliceReader{recs: recs})
		if err != nil {
			t.Fatalf("%+v: %v", opt, err)
		}
		if want == nil {
			want = res
			continue
		}
		if !reflect.DeepEqual(res, want) {
			t.Errorf("%+v: result differs from one sequential thread's", opt)
		}
	}
}
