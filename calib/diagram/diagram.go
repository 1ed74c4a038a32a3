package diagram

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

// Options controls Write. The zero value draws at most 16 classes,
// names classes by index and titles the figures "Reliability".
type Options struct {
	// ClassNames names the classes in label order; classes beyond its
	// length are named by index.
	ClassNames []string
	// MaxClasses caps the classes drawn in the per-class grid (the first
	// MaxClasses classes); 0 means 16.
	MaxClasses int
	// Title prefixes the figure titles; "" means "Reliability".
	Title string
}

var (
	colorBefore = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	colorAfter  = color.RGBA{R: 31, G: 119, B: 180, A: 255}
)

// Write draws the top-label and per-class reliability diagrams of before
// (and of after, when it is not nil) into dir as top.png, top.svg,
// classes.png and classes.svg, creating dir if needed, and returns the
// paths written. before and after must have the same number of classes.
func Write(dir string, before, after *calib.Reliability, opt Options) ([]string, error) {
	if before == nil {
		return nil, fmt.Errorf("diagram: no reliability data")
	}
	if after != nil && len(after.Class) != len(before.Class) {
		return nil, fmt.Errorf("diagram: before has %d classes, after %d", len(before.Class), len(after.Class))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	title := opt.Title
	if title == "" {
		title = "Reliability"
	}

	top := curvePlot(title+": top label", beforeAfter(before.Top, after, func(r *calib.Reliability) []calib.ReliabilityBin { return r.Top }))
	top.X.Label.Text = "confidence (max probability)"
	top.Y.Label.Text = "accuracy"

	maxC := opt.MaxClasses
	if maxC <= 0 {
		maxC = 16
	}
	nc := min(len(before.Class), maxC)
	cols := 4
	if nc < cols {
		cols = nc
	}
	rows := (nc + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
	}
	for j := 0; j < nc; j++ {
		name := fmt.Sprint(j)
		if j < len(opt.ClassNames) {
			name = opt.ClassNames[j]
		}
		jj := j
		p := curvePlot("class "+name, beforeAfter(before.Class[j], after, func(r *calib.Reliability) []calib.ReliabilityBin { return r.Class[jj] }))
		if j > 0 {
			p.Legend = plot.NewLegend()
		}
		grid[j/cols][j%cols] = p
	}

	var written []string
	const size = 4 * vg.Inch
	for _, f := range []struct {
		name string
		w, h vg.Length
		draw func(dc draw.Canvas)
	}{
		{"top", size, size, func(dc draw.Canvas) { top.Draw(dc) }},
		{"classes", size * vg.Length(cols) * 0.7, size * vg.Length(rows) * 0.7, func(dc draw.Canvas) {
			t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
				PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
			cs := plot.Align(grid, t, dc)
			for r := range grid {
				for c := range grid[r] {
					if grid[r][c] != nil {
						grid[r][c].Draw(cs[r][c])
					}
				}
			}
		}},
	} {
		png := vgimg.New(f.w, f.h)
		f.draw(draw.New(png))
		svg := vgsvg.New(f.w, f.h)
		f.draw(draw.New(svg))
		for _, out := range []struct {
			ext string
			w   io.WriterTo
		}{{".png", vgimg.PngCanvas{Canvas: png}}, {".svg", svg}} {
			path := filepath.Join(dir, f.name+out.ext)
			var buf bytes.Buffer
			if _, err := out.w.WriteTo(&buf); err != nil {
				return written, err
			}
			if err := fileio.Write(path, buf.Bytes()); err != nil {
				return written, err
			}
			written = append(written, path)
		}
	}
	return written, nil
}

type curve struct {
	label string
	bins  []calib.ReliabilityBin
	color color.Color
}

func beforeAfter(b []calib.ReliabilityBin, after *calib.Reliability, pick func(*calib.Reliability) []calib.ReliabilityBin) []curve {
	cs := []curve{{"before", b, colorBefore}}
	if after != nil {
		cs = append(cs, curve{"after", pick(after), colorAfter})
	}
	return cs
}

// curvePlot draws the diagonal and one line with points per curve, using
// only the non-empty bins.
func curvePlot(title string, curves []curve) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	diag, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
	diag.Color = color.Gray{Y: 128}
	diag.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(diag)
	for _, c := range curves {
		var xys plotter.XYs
		for _, b := range c.bins {
			if b.Count > 0 {
				xys = append(xys, plotter.XY{X: b.Confidence, Y: b.Frequency})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			continue // non-finite points cannot come from valid bins
		}
		l.Color, s.Color = c.color, c.color
		p.Add(l, s)
		p.Legend.Add(c.label, l, s)
	}
	p.Legend.Left, p.Legend.Top = true, true
	return p
}
