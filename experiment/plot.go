package experiment

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/fedcalib/fedcalib/internal/fileio"
)

// axisTitles label the plot axes.
var axisTitles = map[string]string{
	"rounds": "rounds T", "beta": "β (label skew; smaller is more skewed)", "epsilon": "ε", "delta": "δ",
	"mexp": "M (2^M bins)", "clip": "clip norm C", "clip_pos": "clip norm C+", "clip_neg": "clip norm C-",
	"dp_alpha_z":        "z of the DP weighting",
	"clients_per_round": "clients per round", "sample_rate": "sample rate p", "server_lr": "server learning rate",
	"cwece": "test cwECE (%)", "ece": "test ECE (%)", "accuracy": "test accuracy (%)", "nll": "test NLL",
	"brier": "test Brier score", "bytes_sent": "bytes sent per client per round",
	"bytes_received": "bytes received per client per round", "participants": "client participations",
	"epsilon_spent": "ε spent", "sigma": "noise σ",
}

// shortNames name the metrics in titles.
var shortNames = map[string]string{
	"cwece": "cwECE", "ece": "ECE", "accuracy": "accuracy", "nll": "NLL", "brier": "Brier score",
	"bytes_sent": "bytes sent", "bytes_received": "bytes received", "participants": "participations",
	"epsilon_spent": "ε spent", "sigma": "σ",
}

// seriesNames name parameters in legends.
var seriesNames = map[string]string{
	"rounds": "T", "beta": "β", "epsilon": "ε", "delta": "δ", "mexp": "M", "clip": "C", "clip_pos": "C+",
	"clip_neg": "C-", "dp_alpha_z": "z", "clients_per_round": "k", "sample_rate": "p", "server_lr": "η", "accountant": "",
}

// plotScale turns a metric into the plotted unit.
func plotScale(metric string) float64 {
	switch metric {
	case "cwece", "ece", "accuracy":
		return 100
	}
	return 1
}

// drawPlots draws every plot of cfg for every dataset into dir and
// returns the files written.
func drawPlots(cfg *Config, dir string, rows []Row) ([]string, error) {
	var files []string
	var datasets []string
	for i := range rows {
		if !slices.Contains(datasets, rows[i].Dataset) {
			datasets = append(datasets, rows[i].Dataset)
		}
	}
	for k := range cfg.Plots {
		pl := &cfg.Plots[k]
		for _, ds := range datasets {
			var sel []Row
			for i := range rows {
				if rows[i].Dataset == ds && pl.keeps(&rows[i]) && rows[i].param(pl.X) != "" {
					sel = append(sel, rows[i])
				}
			}
			if len(sel) == 0 {
				continue
			}
			format := cmp.Or(pl.Format, "png")
			path := filepath.Join(dir, fmt.Sprintf("%s-%s.%s", pl.Name, slug(ds), format))
			if err := pl.draw(path, format, ds, sel); err != nil {
				return files, fmt.Errorf("plot %s: %w", pl.Name, err)
			}
			files = append(files, path)
		}
	}
	return files, nil
}

// keeps reports whether r passes the plot's filter.
func (pl *Plot) keeps(r *Row) bool {
	for k, want := range pl.Where {
		if want == "none" {
			want = ""
		}
		var got string
		if k == "dataset" {
			got = r.Dataset
		} else {
			got = r.param(k)
		}
		if got != want {
			// Numbers may be written differently ("1e-5", "0.00001").
			a, errA := strconv.ParseFloat(got, 64)
			b, errB := strconv.ParseFloat(want, 64)
			if errA != nil || errB != nil || a != b {
				return false
			}
		}
	}
	return true
}

// slug makes a dataset name usable in a file name.
func slug(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

// series is one line of a plot: its points' x values and the y values of
// each x over seeds.
type series struct {
	label string
	ys    map[float64][]float64
}

func (pl *Plot) draw(path, format, dataset string, rows []Row) error {
	seriesBy := pl.Series
	if len(seriesBy) == 0 {
		seriesBy = []string{"method"}
	}
	// Parameters that vary besides x, the series and the seed split the
	// series further, so that different settings are never averaged.
	var others []string
	for _, p := range varying(rows, Params()) {
		if p != pl.X && p != "seed" && !slices.Contains(seriesBy, p) && !(p == "weighting" && slices.Contains(seriesBy, "method")) {
			others = append(others, p)
		}
	}
	by := append(slices.Clone(seriesBy), others...)
	scale := plotScale(pl.Y)
	var lines []*series
	index := map[string]*series{}
	base := map[float64][]float64{}
	for i := range rows {
		r := &rows[i]
		x, err := strconv.ParseFloat(r.param(pl.X), 64)
		if err != nil {
			return fmt.Errorf("x %s = %q is not a number", pl.X, r.param(pl.X))
		}
		label := seriesLabel(r, by)
		s, ok := index[label]
		if !ok {
			s = &series{label: label, ys: map[float64][]float64{}}
			index[label] = s
			lines = append(lines, s)
		}
		s.ys[x] = append(s.ys[x], scale*r.metric(pl.Y))
		if b, ok := r.baseMetric(pl.Y); ok {
			base[x] = append(base[x], scale*b)
		}
	}

	p := plot.New()
	p.Title.Text = pl.Title
	if p.Title.Text == "" {
		p.Title.Text = fmt.Sprintf("%s: %s vs %s", dataset, shortNames[pl.Y], cmp.Or(seriesNames[pl.X], pl.X))
	}
	p.X.Label.Text = axisTitles[pl.X]
	p.Y.Label.Text = axisTitles[pl.Y]
	if pl.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	legend := plot.NewLegend()
	legend.Left, legend.Top = true, true
	legend.TextStyle.Font.Size = vg.Points(9)
	for k, s := range lines {
		pts := meanPoints(s.ys)
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(k)
		line.Dashes = plotutil.Dashes(k / len(plotutil.DefaultColors))
		points.Color = plotutil.Color(k)
		points.Shape = plotutil.Shape(k)
		p.Add(line, points)
		if hasSpread(pts) {
			bars, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return err
			}
			bars.Color = plotutil.Color(k)
			p.Add(bars)
		}
		legend.Add(s.label, line, points)
	}
	if len(base) > 0 {
		line, err := plotter.NewLine(meanPoints(base).XYs)
		if err != nil {
			return err
		}
		line.Color = color.Gray{Y: 96}
		line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(line)
		legend.Add("base model", line)
	}
	// The legend goes right of the plot, so that it never hides data.
	const width, height = 6 * vg.Inch, 4 * vg.Inch
	probe, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return err
	}
	lw := legend.Rectangle(draw.New(probe)).Size().X + vg.Points(12)
	c, err := draw.NewFormattedCanvas(width+lw, height, format)
	if err != nil {
		return err
	}
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, 0, -lw, 0, 0))
	legend.Draw(draw.Crop(dc, width+vg.Points(6), 0, 0, -vg.Points(24)))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return err
	}
	return fileio.Write(path, buf.Bytes())
}

// seriesLabel names the series of r: its method label and the values of
// the other series parameters.
func seriesLabel(r *Row, by []string) string {
	var parts []string
	for _, p := range by {
		switch p {
		case "method":
			parts = append(parts, r.Label())
		case "weighting":
			if !slices.Contains(by, "method") && r.Weighting != "" {
				parts = append(parts, string(r.Weighting)+" weight")
			}
		default:
			v := r.param(p)
			switch {
			case v == "" && p == "epsilon":
				v = "∞"
			case v == "" && p == "dp_alpha_z":
				v = "0"
			case v == "":
				continue
			}
			if n := seriesNames[p]; n != "" {
				v = n + "=" + v
			}
			parts = append(parts, v)
		}
	}
	return strings.Join(parts, ", ")
}

// errPoints are points with symmetric error bars.
type errPoints struct {
	plotter.XYs
	plotter.YErrors
}

// meanPoints returns, in increasing x, the mean of each x's values with
// their sample standard deviation as error.
func meanPoints(ys map[float64][]float64) errPoints {
	xs := make([]float64, 0, len(ys))
	for x := range ys {
		xs = append(xs, x)
	}
	slices.Sort(xs)
	out := errPoints{XYs: make(plotter.XYs, len(xs)), YErrors: make(plotter.YErrors, len(xs))}
	for i, x := range xs {
		m, s := meanStd(ys[x])
		out.XYs[i] = plotter.XY{X: x, Y: m}
		out.YErrors[i].Low, out.YErrors[i].High = s, s
	}
	return out
}

func hasSpread(p errPoints) bool {
	for _, e := range p.YErrors {
		if e.High > 0 {
			return true
		}
	}
	return false
}
