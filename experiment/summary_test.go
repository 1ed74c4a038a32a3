package experiment

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/calib"
)

// handRows are six runs on one dataset: FedBBQ and FedTemp over seeds 1–3,
// with cwECE 1%, 2%, 3% (FedBBQ) and 2%, 2%, 2% (FedTemp), base cwECE 4%
// and accuracy 90%. FedBBQ's second run loses 2 points of accuracy.
func handRows() []Row {
	var rows []Row
	for k, m := range []string{"bbq", "temp"} {
		for s := 1; s <= 3; s++ {
			r := Row{
				ID:   strings.Repeat(string(rune('a'+k)), 15) + string(rune('0'+s)),
				Cell: Cell{Dataset: "d", Method: m, Rounds: 12, Beta: 0.1, SampleRate: 0.1, Seed: uint64(s)},
				Base: calib.Metrics{N: 100, CWECE: 0.04, Accuracy: 0.9}, Clients: 10, TestRows: 100,
			}
			r.After = calib.Metrics{N: 100, CWECE: 0.02, Accuracy: 0.9}
			if m == "bbq" {
				r.Weighting, r.Mexp = calib.WeightNone, 7
				r.After.CWECE = float64(s) / 100
				r.BytesSent = 20480
			} else {
				r.ServerLR = 1
				r.BytesSent, r.BytesReceived = 8, 8
			}
			if m == "bbq" && s == 2 {
				r.After.Accuracy = 0.88
				r.AccuracyDrop = true
			}
			rows = append(rows, r)
		}
	}
	return rows
}

func TestSummaryByHand(t *testing.T) {
	cfg := &Config{Name: "hand", Summary: Summary{Metrics: []string{"cwece", "accuracy", "bytes_sent"}}}
	var b bytes.Buffer
	if err := WriteSummary(&b, cfg, handRows()); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	// FedBBQ cwECE: mean 2%, sample standard deviation
	// sqrt(((1−2)² + 0 + (3−2)²)/2) = 1%; marked, so FedTemp's 2.000 (0.000)
	// is the bold one although the means tie. Accuracy: FedBBQ
	// (90 + 88 + 90)/3 = 89.33%, sd sqrt((0.667² + 1.333² + 0.667²)/2) =
	// 1.15 points.
	for _, want := range []string{
		"| Dataset | Base | FedBBQ | FedTemp |",
		"| d | 4.000 | 2.000\\* (1.000) | **2.000 (0.000)** |",
		"| d | 90.00 | 89.33\\* (1.15) | 90.00 (0.00) |",
		"| Dataset | FedBBQ | FedTemp |",
		"| d | 20480 | 8 |",
		"6 runs over 3 seeds",
	} {
		if !strings.Contains(got, want+"\n") && !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	// Without the drop, FedBBQ's 2.000 (1.000) ties FedTemp's mean and the
	// first (FedBBQ) is bold.
	rows := handRows()
	rows[1].AccuracyDrop = false
	b.Reset()
	WriteSummary(&b, cfg, rows)
	if !strings.Contains(b.String(), "| d | 4.000 | **2.000 (1.000)** | 2.000 (0.000) |") {
		t.Errorf("without the drop:\n%s", b.String())
	}
}

func TestSummaryVaryingParameters(t *testing.T) {
	rows := handRows()
	// Split FedTemp's runs over two Ts: T becomes a column, and FedBBQ's
	// runs (all T = 12) sit on the T = 12 line only.
	rows[5].Rounds = 30
	var b bytes.Buffer
	WriteSummary(&b, &Config{Name: "vary"}, rows)
	for _, want := range []string{
		"| Dataset | T | Base | FedBBQ | FedTemp |",
		"| d | 12 | 4.000 | 2.000\\* (1.000) | **2.000 (0.000)** |",
		"| d | 30 | 4.000 |  | **2.000** |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

func TestSummaryKeepsPrivateRunsApart(t *testing.T) {
	rows := handRows()
	// Three private FedBBQ runs with cwECE 10%: ε becomes a column, the
	// runs without privacy stay on the "none" line, and C₊ (private
	// binning only, one value) is no column.
	for s := 1; s <= 3; s++ {
		r := rows[s-1]
		r.ID = "cccccccccccccc0" + string(rune('0'+s))
		r.Epsilon, r.Delta, r.ClipPos, r.ClipNeg, r.Accountant = 3, 1e-5, 10, 50, "zcdp"
		r.After.CWECE, r.AccuracyDrop = 0.1, false
		rows = append(rows, r)
	}
	var b bytes.Buffer
	WriteSummary(&b, &Config{Name: "dp"}, rows)
	for _, want := range []string{
		"| Dataset | ε | Base | FedBBQ | FedTemp |",
		"| d | none | 4.000 | 2.000\\* (1.000) | **2.000 (0.000)** |",
		"| d | 3 | 4.000 | **10.000 (0.000)** |  |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

func TestSummaryRepeatsRunsAParameterDoesNotApplyTo(t *testing.T) {
	rows := handRows()
	// FedTemp's clip norm varies; FedBBQ has none, so its runs belong on
	// both lines and make no line of their own.
	rows[3].Clip, rows[4].Clip, rows[5].Clip = 0.25, 0.25, 0.5
	var b bytes.Buffer
	WriteSummary(&b, &Config{Name: "clip"}, rows)
	got := b.String()
	for _, want := range []string{
		"| Dataset | C | Base | FedBBQ | FedTemp |",
		"| d | 0.25 | 4.000 | 2.000\\* (1.000) | **2.000 (0.000)** |",
		"| d | 0.5 | 4.000 | 2.000\\* (1.000) | **2.000** |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "| d | – |") {
		t.Errorf("FedBBQ got a line of its own:\n%s", got)
	}
}

func TestTimingsSummary(t *testing.T) {
	rows := handRows()
	times := map[string]Timing{}
	for i, r := range rows {
		// Client time: run i has 4 participations totalling 4(i+1) ms,
		// fastest (i+1)/2 ms, slowest 2(i+1) ms; wall 10 ms.
		ms := time.Millisecond
		times[r.ID] = Timing{ID: r.ID, Participants: 4, ComputeTotal: time.Duration(4*(i+1)) * ms,
			ComputeMin: time.Duration(i+1) * ms / 2, ComputeMax: time.Duration(2*(i+1)) * ms, Wall: 10 * ms}
	}
	var b bytes.Buffer
	WriteTimings(&b, &Config{Name: "t"}, rows, times)
	// FedBBQ: runs 0–2, mean (4+8+12)/12 = 2 ms, min 0.5 ms, max 6 ms.
	// FedTemp: runs 3–5, mean (16+20+24)/12 = 5 ms, min 2 ms, max 12 ms.
	for _, want := range []string{
		"| d | FedBBQ | 0.002 | 0.0005 | 0.006 | 0.01 | 3 |",
		"| d | FedTemp | 0.005 | 0.002 | 0.012 | 0.01 | 3 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("timings lack %q:\n%s", want, b.String())
		}
	}
}

func TestAccuracyDropped(t *testing.T) {
	for _, tc := range []struct {
		n, before, after int // correct predictions
		want             bool
	}{
		{1000, 900, 890, false}, // exactly 1 point
		{1000, 900, 889, true},
		{1000, 900, 950, false},
		{7003, 6500, 6430, false}, // 0.9996 points
		{7003, 6500, 6429, true},  // 1.0138 points
		{3, 3, 2, true},
	} {
		m := func(c int) calib.Metrics { return calib.Metrics{N: tc.n, Accuracy: float64(c) / float64(tc.n)} }
		if got := accuracyDropped(m(tc.after), m(tc.before)); got != tc.want {
			t.Errorf("%d → %d of %d: dropped %v, want %v", tc.before, tc.after, tc.n, got, tc.want)
		}
	}
}

func TestRunsRoundTrip(t *testing.T) {
	rows := handRows()
	rows[0].Epsilon, rows[0].Delta, rows[0].ClipPos, rows[0].ClipNeg, rows[0].Accountant = 1, 1e-5, 10, 50, "zcdp"
	rows[0].EpsilonSpent, rows[0].Sigma, rows[0].AlphaZ = 0.9999999999, 123.456, 2
	rows[0].After.NLL, rows[0].After.Brier = math.Pi, 1/3.0
	rows[3].ClientsPerRound = 10
	var b bytes.Buffer
	if err := EncodeRuns(&b, rows); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRuns(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Errorf("round trip changed the rows:\n got %+v\nwant %+v", got[0], rows[0])
	}
	var again bytes.Buffer
	EncodeRuns(&again, got)
	if again.String() != b.String() {
		t.Error("re-encoding decoded rows changes runs.csv")
	}
	for _, bad := range []string{
		"",
		"cell,dataset\n",
		strings.Replace(b.String(), ",12,", ",twelve,", 1),
		strings.Replace(b.String(), ",zcdp,1,", ",zcdp,-1,", 1),
	} {
		if _, err := DecodeRuns(strings.NewReader(bad)); err == nil {
			t.Errorf("no error for %.60q", bad)
		}
	}
}

func FuzzDecodeRuns(f *testing.F) {
	var b bytes.Buffer
	EncodeRuns(&b, handRows())
	f.Add(b.Bytes())
	f.Add([]byte(strings.Join(runsHeader, ",") + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := DecodeRuns(bytes.NewReader(data))
		if err != nil {
			return
		}
		// What decodes re-encodes and decodes to the same rows.
		var out bytes.Buffer
		if err := EncodeRuns(&out, rows); err != nil {
			t.Fatal(err)
		}
		again, err := DecodeRuns(&out)
		if err != nil {
			t.Fatalf("re-encoded rows do not decode: %v", err)
		}
		if len(again) != len(rows) {
			t.Fatalf("%d rows, then %d", len(rows), len(again))
		}
	})
}
