package diagram

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/fedcalib/fedcalib/calib"
)

// Binning is how the confidences of a reliability diagram are binned.
// The zero value is EqualWidth.
type Binning int

const (
	// EqualWidth bins [0, 1] into equal intervals: a confidence v falls in
	// bin calib.Bin(v, bins), as the metrics bin it.
	EqualWidth Binning = iota
	// EqualMass sorts the examples by confidence and cuts them into bins of
	// n/bins examples each (the first n mod bins bins hold one fewer), as
	// the adaptive ECE does.
	EqualMass
)

// String returns "equal-width" or "equal-mass".
func (b Binning) String() string {
	if b == EqualMass {
		return "equal-mass"
	}
	return "equal-width"
}

// Bin is one bin of a reliability diagram. The zero value is an empty bin
// over [0, 0].
type Bin struct {
	// Lo and Hi are the edges of the bin on the confidence axis: the
	// bin's interval for EqualWidth; for EqualMass, the midpoints between
	// the extreme confidences of adjacent bins, and the smallest and the
	// largest confidence at the ends (so a bin may have no width).
	Lo, Hi float64
	// Confidence is the mean confidence of the bin's examples; 0 when
	// the bin is empty.
	Confidence float64
	// Accuracy is the fraction of the bin's examples whose outcome is 1
	// (a correct top label, or the class for one-vs-rest); 0 when empty.
	Accuracy float64
	// Count is the number of examples in the bin.
	Count int
}

// Outcomes are the confidences of n examples and whether the event they
// predict happened: the data a reliability diagram bins. The zero value
// holds no examples.
type Outcomes struct {
	// Conf holds each example's confidence, in [0, 1].
	Conf []float64
	// Hit is 1 where the event happened, else 0; len(Hit) == len(Conf).
	Hit []float64
}

// Len returns the number of examples.
func (o Outcomes) Len() int { return len(o.Conf) }

// TopLabel returns the top-label outcomes of probs (n×classes,
// row-major) against labels: each row's largest probability (the first on
// ties) and whether its class is the label. It returns an error when the
// shapes disagree or a probability is not finite.
func TopLabel(probs []float64, labels []int, classes int) (Outcomes, error) {
	if err := checkShape(probs, labels, classes); err != nil {
		return Outcomes{}, err
	}
	o := Outcomes{Conf: make([]float64, len(labels)), Hit: make([]float64, len(labels))}
	for i, y := range labels {
		row := probs[i*classes : (i+1)*classes]
		arg := 0
		for j, p := range row {
			if p > row[arg] {
				arg = j
			}
		}
		o.Conf[i] = min(max(row[arg], 0), 1)
		if arg == y {
			o.Hit[i] = 1
		}
	}
	return o, nil
}

// OneVsRest returns the outcomes of class j: each row's probability of
// class j and whether the label is j. Its errors are those of TopLabel,
// and a class out of range.
func OneVsRest(probs []float64, labels []int, classes, j int) (Outcomes, error) {
	if err := checkShape(probs, labels, classes); err != nil {
		return Outcomes{}, err
	}
	if j < 0 || j >= classes {
		return Outcomes{}, fmt.Errorf("diagram: class %d of %d", j, classes)
	}
	o := Outcomes{Conf: make([]float64, len(labels)), Hit: make([]float64, len(labels))}
	for i, y := range labels {
		o.Conf[i] = min(max(probs[i*classes+j], 0), 1)
		if y == j {
			o.Hit[i] = 1
		}
	}
	return o, nil
}

func checkShape(probs []float64, labels []int, classes int) error {
	switch {
	case len(labels) == 0:
		return fmt.Errorf("diagram: %w", calib.ErrEmpty)
	case classes < 1 || len(probs) != len(labels)*classes:
		return fmt.Errorf("diagram: %d probabilities for %d labels of %d classes", len(probs), len(labels), classes)
	}
	for i, p := range probs {
		if math.IsNaN(p) || math.IsInf(p, 0) {
			return fmt.Errorf("diagram: probability %d is %v", i, p)
		}
	}
	return nil
}

// Bins bins o into bins bins by b and returns them in increasing
// confidence. EqualMass gives min(bins, n) bins. It panics when bins < 1
// (a programmer's error).
func (o Outcomes) Bins(bins int, b Binning) []Bin {
	if bins < 1 {
		panic("diagram: bins < 1")
	}
	if b == EqualMass {
		return o.equalMass(bins)
	}
	out := make([]Bin, bins)
	for m := range out {
		out[m].Lo, out[m].Hi = float64(m)/float64(bins), float64(m+1)/float64(bins)
	}
	for i, v := range o.Conf {
		m := calib.Bin(v, bins)
		out[m].Confidence += v
		out[m].Accuracy += o.Hit[i]
		out[m].Count++
	}
	for m := range out {
		if c := out[m].Count; c > 0 {
			out[m].Confidence /= float64(c)
			out[m].Accuracy /= float64(c)
		}
	}
	return out
}

func (o Outcomes) equalMass(bins int) []Bin {
	n := o.Len()
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(o.Conf[a], o.Conf[b]) })
	bins = min(bins, n)
	out := make([]Bin, bins)
	for m := range out {
		lo, hi := m*n/bins, (m+1)*n/bins
		for _, i := range idx[lo:hi] {
			out[m].Confidence += o.Conf[i]
			out[m].Accuracy += o.Hit[i]
		}
		out[m].Count = hi - lo
		out[m].Confidence /= float64(hi - lo)
		out[m].Accuracy /= float64(hi - lo)
		if m == 0 {
			out[m].Lo = o.Conf[idx[0]]
		} else {
			out[m].Lo = (o.Conf[idx[lo-1]] + o.Conf[idx[lo]]) / 2
			out[m-1].Hi = out[m].Lo
		}
	}
	out[bins-1].Hi = o.Conf[idx[n-1]]
	return out
}

// FromReliability returns the equal-width bins of a calib.Reliability
// diagram (its Top or one of its Class slices).
func FromReliability(rb []calib.ReliabilityBin) []Bin {
	out := make([]Bin, len(rb))
	for m, b := range rb {
		out[m] = Bin{Lo: float64(m) / float64(len(rb)), Hi: float64(m+1) / float64(len(rb)),
			Confidence: b.Confidence, Accuracy: b.Frequency, Count: b.Count}
	}
	return out
}

// ECE returns the expected calibration error of bins: Σ (Count/N)·|Accuracy
// − Confidence|, with N the total count; 0 when the bins are empty. It is
// calib's ECE for the top-label bins of EqualWidth binning.
func ECE(bins []Bin) float64 {
	var n, e float64
	for _, b := range bins {
		n += float64(b.Count)
		e += float64(b.Count) * math.Abs(b.Accuracy-b.Confidence)
	}
	if n == 0 {
		return 0
	}
	return e / n
}
