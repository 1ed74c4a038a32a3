package diagram

import (
	"fmt"
	"image/color"
	"math"
	"strconv"
	"strings"
	"unicode"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Curve is the data of one reliability diagram: a label (the
// calibrator, or "uncalibrated") and its bins.
type Curve struct {
	// Label names the curve in the panel's title.
	Label string
	// Bins holds the bins in increasing confidence.
	Bins []Bin
}

// CurveSet is one calibrator's per-class bins, for Classes.
type CurveSet struct {
	// Label names the set ("uncalibrated", a method).
	Label string
	// Classes holds one-vs-rest bins per class, in label order.
	Classes [][]Bin
}

// The colours of the diagrams: bars in blue, the gap in red, as the
// field draws them (Guo et al. 2017).
var (
	colorBar     = color.NRGBA{R: 31, G: 119, B: 180, A: 255}
	colorBarEdge = color.NRGBA{R: 20, G: 60, B: 110, A: 255}
	colorGap     = color.NRGBA{R: 214, G: 39, B: 40, A: 110}
	colorGapEdge = color.NRGBA{R: 214, G: 39, B: 40, A: 255}
	colorFaint   = color.NRGBA{R: 31, G: 119, B: 180, A: 55}
	colorGapLow  = color.NRGBA{R: 214, G: 39, B: 40, A: 35}
	colorGapOver = color.NRGBA{R: 255, G: 190, B: 190, A: 255}
	colorDiag    = color.Gray{Y: 90}
	colorText    = color.Gray{Y: 40}
)

// minCount returns the count below which a bin of bins is drawn faint:
// opt's MinCount, or max(10, ⌈N/100⌉) of the bins' total N.
func (opt Options) minCount(bins []Bin) int {
	if opt.MinCount > 0 {
		return opt.MinCount
	}
	n := 0
	for _, b := range bins {
		n += b.Count
	}
	return max(10, (n+99)/100)
}

// total returns the number of examples in bins.
func total(bins []Bin) int {
	n := 0
	for _, b := range bins {
		n += b.Count
	}
	return n
}

// Reliability draws one field-style reliability diagram per curve, side
// by side (before and after calibration, say), with the legend above the
// panels. Each panel has per-bin bars of accuracy over [Lo, Hi], the gap
// between accuracy and mean confidence shaded red, the diagonal dashed,
// and beneath it the histogram of bin counts with each count written
// above its bar. Bins with fewer than opt's MinCount examples are drawn
// faint with dashed edges. The panel titles give each curve's ECE over
// its bins. It returns an error for no curves or a curve without bins.
func Reliability(curves []Curve, opt Options) (Figure, error) {
	if len(curves) == 0 {
		return Figure{}, fmt.Errorf("diagram: no curves to draw")
	}
	for _, c := range curves {
		if len(c.Bins) == 0 || total(c.Bins) == 0 {
			return Figure{}, fmt.Errorf("diagram: curve %q has no examples", c.Label)
		}
	}
	const (
		colW   = 3.6 * vg.Inch
		panelH = 4.4 * vg.Inch
	)
	legendH := legendHeight()
	w, h := colW*vg.Length(len(curves)), panelH+legendH
	minCounts := make([]int, len(curves))
	for i, c := range curves {
		minCounts[i] = opt.minCount(c.Bins)
	}
	return Figure{Width: w, Height: h, draw: func(dc draw.Canvas) {
		fillWhite(dc)
		top := dc
		top.Min.Y = dc.Max.Y - legendH
		drawLegend(top, barLegend(minCountLabel(minCounts)))
		for i, c := range curves {
			pc := dc
			pc.Max.Y -= legendH
			pc.Min.X = dc.Min.X + colW*vg.Length(i)
			pc.Max.X = pc.Min.X + colW
			pc = draw.Crop(pc, 2*vg.Millimeter, -2*vg.Millimeter, vg.Millimeter, 0)
			title := fmt.Sprintf("%s · ECE %.2f%% · n = %d", text(c.Label), 100*ECE(c.Bins), total(c.Bins))
			drawPanel(pc, title, c.Bins, minCounts[i], false)
		}
	}}, nil
}

// Classes draws per-class small multiples: for each class, one small
// panel per set side by side (before and after, say), as Reliability
// draws them but smaller and without the written counts. It draws at most
// opt's MaxClasses classes (the first), four panels to a row. It returns
// an error for no sets, sets of different numbers of classes, or a class
// without examples.
func Classes(sets []CurveSet, opt Options) (Figure, error) {
	if len(sets) == 0 {
		return Figure{}, fmt.Errorf("diagram: no curve sets to draw")
	}
	nc := len(sets[0].Classes)
	for _, s := range sets {
		if len(s.Classes) != nc {
			return Figure{}, fmt.Errorf("diagram: set %q has %d classes, %q %d", s.Label, len(s.Classes), sets[0].Label, nc)
		}
		for j, b := range s.Classes {
			if total(b) == 0 {
				return Figure{}, fmt.Errorf("diagram: set %q: class %d has no examples", s.Label, j)
			}
		}
	}
	if nc == 0 {
		return Figure{}, fmt.Errorf("diagram: no classes to draw")
	}
	nc = min(nc, opt.maxClasses())
	perRow := max(1, 4/len(sets)) // classes per row
	cols := perRow * len(sets)
	if nc < perRow {
		cols = nc * len(sets)
	}
	rows := (nc + perRow - 1) / perRow
	const (
		cellW = 2.1 * vg.Inch
		cellH = 2.6 * vg.Inch
	)
	legendH := legendHeight()
	minCount := math.MaxInt
	for _, s := range sets {
		for _, b := range s.Classes[:nc] {
			minCount = min(minCount, opt.minCount(b))
		}
	}
	return Figure{Width: cellW * vg.Length(cols), Height: cellH*vg.Length(rows) + legendH, draw: func(dc draw.Canvas) {
		fillWhite(dc)
		top := dc
		top.Min.Y = dc.Max.Y - legendH
		drawLegend(top, barLegend(minCountLabel([]int{minCount})))
		for j := range nc {
			for k, s := range sets {
				col := (j%perRow)*len(sets) + k
				row := j / perRow
				pc := dc
				pc.Max.Y = dc.Max.Y - legendH - cellH*vg.Length(row)
				pc.Min.Y = pc.Max.Y - cellH
				pc.Min.X = dc.Min.X + cellW*vg.Length(col)
				pc.Max.X = pc.Min.X + cellW
				pc = draw.Crop(pc, vg.Millimeter, -vg.Millimeter, vg.Millimeter, -vg.Millimeter)
				title := fmt.Sprintf("%s · %s", opt.className(j), text(s.Label))
				drawPanel(pc, title, s.Classes[j], minCount, true)
			}
		}
	}}, nil
}

// className returns the name of class j, as text draws it.
func (opt Options) className(j int) string {
	if j < len(opt.ClassNames) && opt.ClassNames[j] != "" {
		return text(opt.ClassNames[j])
	}
	return "class " + strconv.Itoa(j)
}

// text returns s as a figure writes it: one line, its control characters
// (which SVG cannot hold) as U+FFFD.
func text(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == 0xFFFE || r == 0xFFFF {
			return '\uFFFD'
		}
		return r
	}, s)
}

func (opt Options) maxClasses() int {
	if opt.MaxClasses > 0 {
		return opt.MaxClasses
	}
	return 16
}

func minCountLabel(mins []int) string {
	lo, hi := mins[0], mins[0]
	for _, m := range mins {
		lo, hi = min(lo, m), max(hi, m)
	}
	if lo == hi {
		return fmt.Sprintf("fewer than %d examples", lo)
	}
	return fmt.Sprintf("fewer than %d–%d examples", lo, hi)
}

// fillWhite paints c's background white, so that PNGs are opaque.
func fillWhite(c draw.Canvas) {
	c.FillPolygon(color.White, []vg.Point{c.Min, {X: c.Max.X, Y: c.Min.Y}, c.Max, {X: c.Min.X, Y: c.Max.Y}})
}

// drawPanel draws one reliability panel into c: the diagram over the top
// 70% and the count histogram beneath, their data areas aligned. A small
// panel uses smaller type and writes no counts.
func drawPanel(c draw.Canvas, title string, bins []Bin, minCount int, small bool) {
	rel := plot.New()
	rel.Title.Text = title
	rel.Title.TextStyle.Font.Size = vg.Points(10)
	rel.X.Min, rel.X.Max, rel.Y.Min, rel.Y.Max = 0, 1, 0, 1
	rel.Y.Label.Text = "accuracy"
	rel.X.Tick.Marker = unlabelledTicks{}
	rel.Y.Tick.Marker = fractionTicks{}
	rel.Add(diagonal{}, bars{bins: bins, minCount: minCount})

	hist := plot.New()
	hist.X.Min, hist.X.Max = 0, 1
	hist.X.Label.Text = "confidence"
	hist.Y.Label.Text = "count"
	hist.X.Tick.Marker = fractionTicks{}
	maxCount := 0
	for _, b := range bins {
		maxCount = max(maxCount, b.Count)
	}
	hist.Y.Min = 0
	hist.Y.Max = float64(maxCount) / 0.6 // the top 40% holds the written counts
	if small {
		hist.Y.Max = float64(maxCount) * 1.05
	}
	hist.Y.Tick.Marker = countTicks{max: maxCount}
	hist.Add(counts{bins: bins, minCount: minCount, write: !small})
	if small {
		rel.Title.TextStyle.Font.Size = vg.Points(8)
		for _, p := range []*plot.Plot{rel, hist} {
			p.X.Label.TextStyle.Font.Size = vg.Points(8)
			p.Y.Label.TextStyle.Font.Size = vg.Points(8)
			p.X.Tick.Label.Font.Size = vg.Points(7)
			p.Y.Tick.Label.Font.Size = vg.Points(7)
		}
	}
	stack(c, []*plot.Plot{rel, hist}, []float64{0.7, 0.3})
}

// stack draws plots one above the other in c, each taking its fraction
// of the height (top first), with their data areas aligned horizontally.
func stack(c draw.Canvas, plots []*plot.Plot, frac []float64) {
	cs := make([]draw.Canvas, len(plots))
	top, height := c.Max.Y, c.Max.Y-c.Min.Y
	for i := range plots {
		h := height * vg.Length(frac[i])
		cs[i] = c
		cs[i].Max.Y, cs[i].Min.Y = top, top-h
		top -= h
	}
	var left, right vg.Length
	for i, p := range plots {
		d := p.DataCanvas(cs[i])
		left = max(left, d.Min.X-cs[i].Min.X)
		right = max(right, cs[i].Max.X-d.Max.X)
	}
	for i, p := range plots {
		d := p.DataCanvas(cs[i])
		l, r := left-(d.Min.X-cs[i].Min.X), right-(cs[i].Max.X-d.Max.X)
		p.Draw(draw.Crop(cs[i], l, -r, 0, 0))
	}
}

// minBar is the narrowest a bar is drawn: an equal-mass bin of equal
// confidences has no width.
const minBar = vg.Length(1.2)

// barX returns the bar's edges on the canvas, widened about its centre
// to minBar.
func barX(x0, x1 vg.Length) (vg.Length, vg.Length) {
	if x1-x0 < minBar {
		mid := (x0 + x1) / 2
		return mid - minBar/2, mid + minBar/2
	}
	return x0, x1
}

// rect returns the rectangle [x0, x1]×[y0, y1] as a polygon.
func rect(x0, x1, y0, y1 vg.Length) []vg.Point {
	return []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}, {X: x0, Y: y0}}
}

// diagonal is the dashed line of perfect calibration.
type diagonal struct{}

func (diagonal) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	c.StrokeLine2(draw.LineStyle{Color: colorDiag, Width: vg.Points(0.8), Dashes: []vg.Length{vg.Points(3), vg.Points(3)}},
		tx(0), ty(0), tx(1), ty(1))
}

// bars draws a bin's accuracy as a bar over [Lo, Hi] and the gap to its
// mean confidence shaded; bins below minCount faint with dashed edges.
type bars struct {
	bins     []Bin
	minCount int
}

func (b bars) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	solid := draw.LineStyle{Color: colorBarEdge, Width: vg.Points(0.6)}
	dashed := draw.LineStyle{Color: colorBarEdge, Width: vg.Points(0.5), Dashes: []vg.Length{vg.Points(2), vg.Points(2)}}
	gapEdge := draw.LineStyle{Color: colorGapEdge, Width: vg.Points(0.6)}
	for _, bin := range b.bins {
		if bin.Count == 0 {
			continue
		}
		faint := bin.Count < b.minCount
		x0, x1 := barX(tx(bin.Lo), tx(bin.Hi))
		y0, ya, yc := ty(0), ty(bin.Accuracy), ty(bin.Confidence)
		fill, gap, edge := colorBar, colorGap, solid
		if faint {
			fill, gap, edge = colorFaint, colorGapLow, dashed
		}
		c.FillPolygon(fill, rect(x0, x1, y0, ya))
		c.StrokeLines(edge, rect(x0, x1, y0, ya))
		g0, g1 := min(ya, yc), max(ya, yc)
		c.FillPolygon(gap, rect(x0, x1, g0, g1))
		if !faint {
			h := draw.LineStyle{Color: colorGapEdge, Width: vg.Points(0.5)}
			if bin.Accuracy > bin.Confidence { // the gap lies over the bar: light lines
				h = draw.LineStyle{Color: colorGapOver, Width: vg.Points(0.7)}
			}
			hatch(c, x0, x1, g0, g1, h)
			c.StrokeLine2(gapEdge, x0, yc, x1, yc) // the mean confidence
		}
	}
}

func (b bars) DataRange() (xmin, xmax, ymin, ymax float64) { return 0, 1, 0, 1 }

// counts draws the histogram of bin counts and, when write is set, each
// count above its bar (turned upright when the bars are narrow; left out
// where it would overlap the count before).
type counts struct {
	bins     []Bin
	minCount int
	write    bool
}

func (h counts) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	sty := p.X.Tick.Label
	sty.Font.Size = vg.Points(6.5)
	sty.Color = colorText
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YBottom
	narrow := false
	for _, bin := range h.bins {
		if bin.Count > 0 && tx(bin.Hi)-tx(bin.Lo) < sty.Width(strconv.Itoa(bin.Count))+vg.Points(2) {
			narrow = true
		}
	}
	if narrow {
		sty.Rotation = math.Pi / 2
		sty.XAlign, sty.YAlign = draw.XLeft, draw.YCenter
	}
	// The least distance between the centres of two written counts: a
	// line's height when upright, the widest count's width otherwise.
	gap := sty.FontExtents().Height
	if !narrow {
		gap = 0
		for _, bin := range h.bins {
			gap = max(gap, sty.Width(strconv.Itoa(bin.Count))+vg.Points(2))
		}
	}
	var (
		written bool
		last    vg.Length
	)
	for _, bin := range h.bins {
		if bin.Count == 0 {
			continue
		}
		faint := bin.Count < h.minCount
		x0, x1 := barX(tx(bin.Lo), tx(bin.Hi))
		y0, y1 := ty(0), ty(float64(bin.Count))
		fill, edge := colorBar, draw.LineStyle{Color: colorBarEdge, Width: vg.Points(0.5)}
		if faint {
			fill, edge.Dashes = colorFaint, []vg.Length{vg.Points(2), vg.Points(2)}
		}
		c.FillPolygon(fill, rect(x0, x1, y0, y1))
		c.StrokeLines(edge, rect(x0, x1, y0, y1))
		// A count is written unless it would overlap the last one written.
		if mid := (x0 + x1) / 2; h.write && (!written || mid-last >= gap) {
			c.FillText(sty, vg.Point{X: mid, Y: y1 + vg.Points(1.5)}, strconv.Itoa(bin.Count))
			written, last = true, mid
		}
	}
}

func (h counts) DataRange() (xmin, xmax, ymin, ymax float64) {
	m := 0
	for _, b := range h.bins {
		m = max(m, b.Count)
	}
	return 0, 1, 0, float64(m)
}

// hatch strokes diagonal lines 3 points apart across the rectangle
// [x0, x1]×[y0, y1], so that the gap reads as a gap over a bar too.
func hatch(c draw.Canvas, x0, x1, y0, y1 vg.Length, sty draw.LineStyle) {
	const step = 3
	// The lines y = x − k for k from x0 − y1 to x1 − y0.
	for k := x0 - y1; k < x1-y0; k += vg.Points(step) {
		sx, ex := max(x0, y0+k), min(x1, y1+k)
		if ex-sx < vg.Points(0.2) {
			continue
		}
		c.StrokeLine2(sty, sx, sx-k, ex, ex-k)
	}
}

// unlabelledTicks marks 0, 0.2, …, 1 without labels (the histogram
// beneath carries them).
type unlabelledTicks struct{}

func (unlabelledTicks) Ticks(min, max float64) []plot.Tick {
	ts := fractionTicks{}.Ticks(min, max)
	for i := range ts {
		ts[i].Label = ""
	}
	return ts
}

// fractionTicks marks 0, 0.2, …, 1 with labels and the tenths between.
type fractionTicks struct{}

func (fractionTicks) Ticks(_, _ float64) []plot.Tick {
	var ts []plot.Tick
	for i := 0; i <= 10; i++ {
		t := plot.Tick{Value: float64(i) / 10}
		if i%2 == 0 {
			t.Label = strconv.FormatFloat(t.Value, 'f', 1, 64)
		}
		ts = append(ts, t)
	}
	return ts
}

// countTicks marks 0 and the largest count, so that the histogram's axis
// is read at a glance.
type countTicks struct{ max int }

func (t countTicks) Ticks(_, _ float64) []plot.Tick {
	return []plot.Tick{{Value: 0, Label: "0"}, {Value: float64(t.max), Label: strconv.Itoa(t.max)}}
}

// legendEntry is one entry of a legend strip: a swatch and its label.
type legendEntry struct {
	label  string
	swatch func(c draw.Canvas, r vg.Rectangle)
}

func legendHeight() vg.Length { return 0.32 * vg.Inch }

// drawLegend draws entries left to right, centred, in the strip c: above
// the panels, so that it never covers data.
func drawLegend(c draw.Canvas, entries []legendEntry) {
	sty := plot.New().Legend.TextStyle
	sty.Font.Size = vg.Points(8.5)
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YCenter
	sw, gap := vg.Points(14), vg.Points(4)
	var width vg.Length
	for i, e := range entries {
		width += sw + gap + sty.Width(e.label)
		if i > 0 {
			width += vg.Points(14)
		}
	}
	x := c.Min.X + (c.Max.X-c.Min.X-width)/2
	y := (c.Min.Y + c.Max.Y) / 2
	for _, e := range entries {
		e.swatch(c, vg.Rectangle{Min: vg.Point{X: x, Y: y - vg.Points(4.5)}, Max: vg.Point{X: x + sw, Y: y + vg.Points(4.5)}})
		x += sw + gap
		c.FillText(sty, vg.Point{X: x, Y: y}, e.label)
		x += sty.Width(e.label) + vg.Points(14)
	}
}

// barLegend is the legend of the bar diagrams.
func barLegend(faint string) []legendEntry {
	box := func(fill color.Color, edge draw.LineStyle) func(draw.Canvas, vg.Rectangle) {
		return func(c draw.Canvas, r vg.Rectangle) {
			c.FillPolygon(fill, rect(r.Min.X, r.Max.X, r.Min.Y, r.Max.Y))
			c.StrokeLines(edge, rect(r.Min.X, r.Max.X, r.Min.Y, r.Max.Y))
		}
	}
	return []legendEntry{
		{"accuracy", box(colorBar, draw.LineStyle{Color: colorBarEdge, Width: vg.Points(0.6)})},
		{"gap to mean confidence", func(c draw.Canvas, r vg.Rectangle) {
			box(colorGap, draw.LineStyle{Color: colorGapEdge, Width: vg.Points(0.6)})(c, r)
			hatch(c, r.Min.X, r.Max.X, r.Min.Y, r.Max.Y, draw.LineStyle{Color: colorGapEdge, Width: vg.Points(0.5)})
		}},
		{faint, box(colorFaint, draw.LineStyle{Color: colorBarEdge, Width: vg.Points(0.5), Dashes: []vg.Length{vg.Points(2), vg.Points(2)}})},
		{"perfect calibration", func(c draw.Canvas, r vg.Rectangle) {
			y := (r.Min.Y + r.Max.Y) / 2
			c.StrokeLine2(draw.LineStyle{Color: colorDiag, Width: vg.Points(0.8), Dashes: []vg.Length{vg.Points(3), vg.Points(3)}}, r.Min.X, y, r.Max.X, y)
		}},
	}
}
