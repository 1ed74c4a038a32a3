package diagram

import (
	"fmt"
	"image/color"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// SmoothOptions sets up Smooth. The zero value chooses the bandwidth as
// relplot does and draws a 95% band from 100 bootstrap resamples, seed 0.
type SmoothOptions struct {
	// Sigma is the kernel's bandwidth; 0 means the σ* at which the
	// smooth ECE equals the bandwidth, smECE_σ* = σ* (relplot's default).
	Sigma float64
	// Resamples is the number of bootstrap resamples of the band; 0 means
	// 100, a negative number draws no band.
	Resamples int
	// Level is the band's confidence level; 0 means 0.95.
	Level float64
	// Seed seeds the PCG stream that draws the resamples.
	Seed uint64
}

// Smoothed is a smoothed (kernel) reliability diagram (Błasiok & Nakkiran
// 2023, relplot). With K the Gaussian kernel of bandwidth σ reflected at 0
// and 1, K(t, f) = φσ(t−f) + φσ(t+f) + φσ(t+f−2), over n examples
// (f_i, y_i):
//
//	density  δ(t) = (1/n) Σ K(t, f_i)
//	curve    ŷ(t) = Σ K(t, f_i)·y_i / Σ K(t, f_i)   (Nadaraya–Watson)
//	smECE_σ       = ∫₀¹ |(1/n) Σ K(t, f_i)·(y_i − f_i)| dt
//
// The confidences are first split linearly between the two nearest of
// the 1,001 points of [0, 1] in steps of 1/1000, as relplot does.
type Smoothed struct {
	// T holds the points of [0, 1] the curve is evaluated at.
	T []float64
	// Y is the curve at T; NaN where the density is negligible.
	Y []float64
	// Lo and Hi bound the pointwise bootstrap band of Y at Level; nil
	// without a band, NaN where Y is.
	Lo, Hi []float64
	// Density is δ at T.
	Density []float64
	// Sigma is the bandwidth used, SmECE the smooth ECE at it.
	Sigma, SmECE float64
	// Level is the band's confidence level; 0 without a band.
	Level float64
	// N is the number of examples.
	N int
}

const (
	smoothFine   = 1001 // the grid the confidences are rounded to: steps of 1/1000
	smoothStride = 5    // the curve is evaluated at every 5th grid point: 201 points
)

// fineWeights holds the examples split onto the fine grid: their count,
// Σ y and Σ (y − f) at each grid point.
type fineWeights struct{ w, wy, wr []float64 }

func newFineWeights() fineWeights {
	return fineWeights{make([]float64, smoothFine), make([]float64, smoothFine), make([]float64, smoothFine)}
}

func (fw fineWeights) add(f, y float64) {
	x := f * (smoothFine - 1)
	b := min(int(x), smoothFine-2)
	frac := x - float64(b)
	for k, w := range [2]float64{1 - frac, frac} {
		fw.w[b+k] += w
		fw.wy[b+k] += w * y
		fw.wr[b+k] += w * (y - f)
	}
}

// phiTable returns φσ at every whole number of fine-grid steps from 0 to
// twice the grid's length.
func phiTable(sigma float64) []float64 {
	const steps = smoothFine - 1
	phi := make([]float64, 2*steps+1)
	c := 1 / (sigma * math.Sqrt(2*math.Pi))
	for d := range phi {
		x := float64(d) / steps
		phi[d] = c * math.Exp(-x*x/(2*sigma*sigma))
	}
	return phi
}

// reflected returns the reflected kernel K between fine-grid points i and
// j from φ's table: every distance is a whole number of grid steps.
func reflected(phi []float64, i, j int) float64 {
	const steps = smoothFine - 1
	d, e := i-j, i+j-2*steps
	if d < 0 {
		d = -d
	}
	if e < 0 {
		e = -e
	}
	return phi[d] + phi[i+j] + phi[e]
}

// nonzero returns the fine-grid points that hold some weight.
func (fw fineWeights) nonzero() []int {
	var nz []int
	for j, w := range fw.w {
		if w != 0 {
			nz = append(nz, j)
		}
	}
	return nz
}

// smECE returns the smooth ECE of fw (n examples) at bandwidth sigma, by
// the trapezoid rule on the fine grid.
func smECE(fw fineWeights, nz []int, n int, sigma float64) float64 {
	phi := phiTable(sigma)
	var s float64
	for i := range smoothFine {
		var r float64
		for _, j := range nz {
			r += reflected(phi, i, j) * fw.wr[j]
		}
		v := math.Abs(r) / float64(n)
		if i == 0 || i == smoothFine-1 {
			v /= 2
		}
		s += v
	}
	return s / (smoothFine - 1)
}

// curve evaluates the density and the curve of fw (n examples) at every
// smoothStride-th fine-grid point into dens and y, with φ's table phi.
func curve(fw fineWeights, n int, phi []float64, dens, y []float64) {
	nz := fw.nonzero()
	for g := range dens {
		i := g * smoothStride
		var sw, swy float64
		for _, j := range nz {
			k := reflected(phi, i, j)
			sw += k * fw.w[j]
			swy += k * fw.wy[j]
		}
		dens[g] = sw / float64(n)
		if sw > 1e-9*float64(n) {
			y[g] = swy / sw
		} else {
			y[g] = math.NaN()
		}
	}
}

// Smooth returns the smoothed reliability diagram of o. It returns an
// error for no examples, an option out of range, or an outcome that is
// not 0 or 1.
func Smooth(o Outcomes, opt SmoothOptions) (*Smoothed, error) {
	n := o.Len()
	switch {
	case n == 0 || len(o.Hit) != n:
		return nil, fmt.Errorf("diagram: smooth: %d confidences and %d outcomes", n, len(o.Hit))
	case opt.Sigma < 0 || math.IsNaN(opt.Sigma) || opt.Sigma > 1:
		return nil, fmt.Errorf("diagram: smooth: bandwidth %v: want σ in (0, 1], or 0 for relplot's", opt.Sigma)
	case opt.Level != 0 && !(opt.Level > 0 && opt.Level < 1):
		return nil, fmt.Errorf("diagram: smooth: level %v: want a fraction in (0, 1)", opt.Level)
	}
	fw := newFineWeights()
	for i, f := range o.Conf {
		if !(f >= 0 && f <= 1) || (o.Hit[i] != 0 && o.Hit[i] != 1) {
			return nil, fmt.Errorf("diagram: smooth: example %d has confidence %v and outcome %v: want [0, 1] and 0 or 1", i, f, o.Hit[i])
		}
		fw.add(f, o.Hit[i])
	}
	nz := fw.nonzero()
	sigma := opt.Sigma
	if sigma == 0 {
		sigma = fixedPoint(fw, nz, n)
	}
	points := (smoothFine-1)/smoothStride + 1
	t := make([]float64, points)
	for g := range t {
		t[g] = float64(g*smoothStride) / (smoothFine - 1)
	}
	phi := phiTable(sigma)
	s := &Smoothed{T: t, Sigma: sigma, SmECE: smECE(fw, nz, n, sigma), N: n}
	s.Density, s.Y = make([]float64, len(t)), make([]float64, len(t))
	curve(fw, n, phi, s.Density, s.Y)
	resamples := opt.Resamples
	if resamples == 0 {
		resamples = 100
	}
	if resamples < 0 {
		return s, nil
	}
	s.Level = opt.Level
	if s.Level == 0 {
		s.Level = 0.95
	}
	rng := rand.New(rand.NewPCG(opt.Seed, 0x736d6f6f)) // "smoo"
	draws := make([][]float64, len(t))
	dens, y := make([]float64, len(t)), make([]float64, len(t))
	for range resamples {
		rw := newFineWeights()
		for range n {
			i := rng.IntN(n)
			rw.add(o.Conf[i], o.Hit[i])
		}
		curve(rw, n, phi, dens, y)
		for g, v := range y {
			if !math.IsNaN(v) {
				draws[g] = append(draws[g], v)
			}
		}
	}
	s.Lo, s.Hi = make([]float64, len(t)), make([]float64, len(t))
	for g, d := range draws {
		if math.IsNaN(s.Y[g]) || len(d) == 0 {
			s.Lo[g], s.Hi[g] = math.NaN(), math.NaN()
			continue
		}
		slices.Sort(d)
		s.Lo[g] = quantile(d, (1-s.Level)/2)
		s.Hi[g] = quantile(d, (1+s.Level)/2)
	}
	return s, nil
}

// quantile returns the q-quantile of sorted d by linear interpolation.
func quantile(d []float64, q float64) float64 {
	x := q * float64(len(d)-1)
	i := int(x)
	if i >= len(d)-1 {
		return d[len(d)-1]
	}
	return d[i] + (x-float64(i))*(d[i+1]-d[i])
}

// fixedPoint returns the bandwidth σ* in [0.001, 1] at which smECE_σ* =
// σ*, by bisection (smECE_σ − σ falls as σ grows); 0.001 when the data
// are calibrated more finely than that.
func fixedPoint(fw fineWeights, nz []int, n int) float64 {
	lo, hi := 0.001, 1.0
	if smECE(fw, nz, n, lo) <= lo {
		return lo
	}
	for range 30 {
		mid := (lo + hi) / 2
		if smECE(fw, nz, n, mid) > mid {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// SmoothCurve is one smoothed diagram to draw, with its label.
type SmoothCurve struct {
	// Label names the curve in the panel's title.
	Label string
	// Smoothed is the diagram's data.
	*Smoothed
}

var (
	colorSmooth = color.NRGBA{R: 200, G: 30, B: 30, A: 255}
	colorBand   = color.NRGBA{R: 120, G: 120, B: 120, A: 150}
	colorDens   = color.NRGBA{R: 120, G: 120, B: 120, A: 140}
)

// Smooths draws the smoothed diagrams side by side as relplot draws them:
// the curve in red and the bootstrap band in grey, both thicker or more
// opaque where confidences are dense and faint where they are few, the
// diagonal dashed, and the density beneath; the legend above the panels.
// It returns an error for no curves.
func Smooths(curves []SmoothCurve, opt Options) (Figure, error) {
	if len(curves) == 0 {
		return Figure{}, fmt.Errorf("diagram: no smoothed curves to draw")
	}
	for _, c := range curves {
		if c.Smoothed == nil || len(c.T) == 0 {
			return Figure{}, fmt.Errorf("diagram: smoothed curve %q has no data", c.Label)
		}
	}
	const (
		colW   = 3.6 * vg.Inch
		panelH = 4.4 * vg.Inch
	)
	legendH := legendHeight()
	level := curves[0].Level
	return Figure{Width: colW * vg.Length(len(curves)), Height: panelH + legendH, draw: func(dc draw.Canvas) {
		fillWhite(dc)
		top := dc
		top.Min.Y = dc.Max.Y - legendH
		drawLegend(top, smoothLegend(level))
		for i, c := range curves {
			pc := dc
			pc.Max.Y -= legendH
			pc.Min.X = dc.Min.X + colW*vg.Length(i)
			pc.Max.X = pc.Min.X + colW
			pc = draw.Crop(pc, 2*vg.Millimeter, -2*vg.Millimeter, vg.Millimeter, 0)
			rel := plot.New()
			rel.Title.Text = fmt.Sprintf("%s · smECE %.2f%% · σ = %.3f", text(c.Label), 100*c.SmECE, c.Sigma)
			rel.Title.TextStyle.Font.Size = vg.Points(10)
			rel.X.Min, rel.X.Max, rel.Y.Min, rel.Y.Max = 0, 1, 0, 1
			rel.Y.Label.Text = "accuracy"
			rel.X.Tick.Marker = unlabelledTicks{}
			rel.Y.Tick.Marker = fractionTicks{}
			rel.Add(smoothPlot{c.Smoothed}, diagonal{})
			dens := plot.New()
			dens.X.Min, dens.X.Max = 0, 1
			dens.X.Label.Text = "confidence"
			dens.Y.Label.Text = "density"
			dens.X.Tick.Marker = fractionTicks{}
			dens.Y.Tick.Marker = plot.ConstantTicks{{Value: 0, Label: "0"}}
			dens.Add(densityPlot{c.Smoothed})
			stack(pc, []*plot.Plot{rel, dens}, []float64{0.7, 0.3})
		}
	}}, nil
}

// runs calls f on each maximal run [i, j) of indices where y is a number.
func runs(y []float64, f func(i, j int)) {
	for i := 0; i < len(y); {
		if math.IsNaN(y[i]) {
			i++
			continue
		}
		j := i
		for j < len(y) && !math.IsNaN(y[j]) {
			j++
		}
		f(i, j)
		i = j
	}
}

type smoothPlot struct{ s *Smoothed }

func (p smoothPlot) Plot(c draw.Canvas, pl *plot.Plot) {
	tx, ty := pl.Transforms(&c)
	s := p.s
	clamp := func(v float64) float64 { return min(max(v, 0), 1) }
	maxD := slices.Max(s.Density)
	dens := func(g int) float64 { return min(1, (s.Density[g]+s.Density[g+1])/2) }
	// As relplot draws them, what few examples support fades: with δ the
	// density (1 where confidences are spread evenly), the band's opacity
	// is 0.6·min(1, δ) and the curve's 0.15 + 0.85·min(1, δ); the curve's
	// thickness grows with √(δ / max δ).
	if s.Lo != nil {
		runs(s.Lo, func(i, j int) {
			bands(i, j, func(g int) float64 { return 0.6 * dens(g) }, func(g int) (vg.Point, vg.Point) {
				return vg.Point{X: tx(s.T[g]), Y: ty(clamp(s.Hi[g]))}, vg.Point{X: tx(s.T[g]), Y: ty(clamp(s.Lo[g]))}
			}, c, colorBand)
		})
	}
	runs(s.Y, func(i, j int) {
		bands(i, j, func(g int) float64 { return 0.15 + 0.85*dens(g) }, func(g int) (vg.Point, vg.Point) {
			h := (vg.Points(0.8) + vg.Points(4.5)*vg.Length(math.Sqrt(s.Density[g]/maxD))) / 2
			x, y := tx(s.T[g]), ty(clamp(s.Y[g]))
			return vg.Point{X: x, Y: y + h}, vg.Point{X: x, Y: y - h}
		}, c, colorSmooth)
	})
}

// bands fills the strip between the upper and lower edges that edge gives
// at the points i to j−1, in col with the opacity that alpha gives each
// step (from g to g+1). The opacity is rounded to sixteenths and the
// steps of one opacity are filled as one polygon, so that few seams show.
func bands(i, j int, alpha func(g int) float64, edge func(g int) (upper, lower vg.Point), c draw.Canvas, col color.NRGBA) {
	level := func(g int) uint8 { return uint8(math.Round(16*min(max(alpha(g), 0), 1)) * 255 / 16) }
	for g := i; g+1 < j; {
		a := level(g)
		h := g + 1
		for h+1 < j && level(h) == a {
			h++
		}
		if a > 0 {
			var up, down []vg.Point
			for k := g; k <= h; k++ {
				u, l := edge(k)
				up, down = append(up, u), append(down, l)
			}
			slices.Reverse(down)
			col.A = a
			c.FillPolygon(col, append(up, down...))
		}
		g = h
	}
}

func (smoothPlot) DataRange() (xmin, xmax, ymin, ymax float64) { return 0, 1, 0, 1 }

type densityPlot struct{ s *Smoothed }

func (p densityPlot) Plot(c draw.Canvas, pl *plot.Plot) {
	tx, ty := pl.Transforms(&c)
	pts := []vg.Point{{X: tx(0), Y: ty(0)}}
	for g, t := range p.s.T {
		pts = append(pts, vg.Point{X: tx(t), Y: ty(p.s.Density[g])})
	}
	pts = append(pts, vg.Point{X: tx(1), Y: ty(0)})
	c.FillPolygon(colorDens, pts)
}

func (p densityPlot) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, 1, 0, slices.Max(p.s.Density) * 1.05
}

func smoothLegend(level float64) []legendEntry {
	entries := []legendEntry{
		{"smoothed accuracy (thickness: density)", func(c draw.Canvas, r vg.Rectangle) {
			y := (r.Min.Y + r.Max.Y) / 2
			c.StrokeLine2(draw.LineStyle{Color: colorSmooth, Width: vg.Points(2.5)}, r.Min.X, y, r.Max.X, y)
		}},
	}
	if level > 0 {
		entries = append(entries, legendEntry{fmt.Sprintf("%g%% bootstrap band", 100*level), func(c draw.Canvas, r vg.Rectangle) {
			c.FillPolygon(colorBand, rect(r.Min.X, r.Max.X, r.Min.Y, r.Max.Y))
		}})
	}
	return append(entries, barLegend("")[3])
}
