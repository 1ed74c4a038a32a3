package report

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"

	"github.com/fedcalib/fedcalib/calib"
)

//go:embed page.html.tmpl
var pageText string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	// pct formats a fraction as a percentage with prec decimals.
	"pct": func(x float64, prec int) string { return strconv.FormatFloat(100*x, 'f', prec, 64) + "%" },
	// num formats x with prec decimals.
	"num": func(x float64, prec int) string { return strconv.FormatFloat(x, 'f', prec, 64) },
	// g formats x compactly.
	"g": func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) },
	// ival formats the interval of metric key of row, as percentages
	// when pct, with prec decimals; "" without one.
	"ival": func(row MetricsRow, key string, pct bool, prec int) string {
		iv, ok := row.Intervals[key]
		if !ok {
			return ""
		}
		scale, unit := 1.0, ""
		if pct {
			scale, unit = 100, "%"
		}
		return fmt.Sprintf("[%s%s, %s%s]", strconv.FormatFloat(scale*iv.Lo, 'f', prec, 64), unit, strconv.FormatFloat(scale*iv.Hi, 'f', prec, 64), unit)
	},
	"signed": func(x float64, scale float64, prec int) string {
		return strconv.FormatFloat(scale*x, 'f', prec, 64)
	},
	"verdictIval": func(v calib.Verdict, key string, scale float64, prec int) string {
		iv, ok := v.Intervals[key]
		if !ok {
			return ""
		}
		return fmt.Sprintf("[%s, %s]", strconv.FormatFloat(scale*iv.Lo, 'f', prec, 64), strconv.FormatFloat(scale*iv.Hi, 'f', prec, 64))
	},
	"deref": func(x *float64) float64 { return *x },
}).Parse(pageText))

// WriteHTML writes r as one self-contained HTML page: inline CSS and SVG,
// no script, and nothing fetched from anywhere (its Content-Security-Policy
// forbids it). It reads on a phone (the layout narrows, wide figures
// scroll) and prints (a print style sheet without backgrounds, figures
// and tables kept whole on a page).
//
// Characters that HTML and XML forbid in text (the C0 controls but tab,
// line feed and carriage return; U+FFFE, U+FFFF), which a file name or a
// record could carry, are written as U+FFFD.
func (r *Report) WriteHTML(w io.Writer) error {
	var buf bytes.Buffer
	if err := page.Execute(&buf, r); err != nil {
		return err
	}
	_, err := io.WriteString(w, strings.Map(xmlChar, buf.String()))
	return err
}

// xmlChar maps a character XML forbids to U+FFFD, for strings.Map.
func xmlChar(r rune) rune {
	switch {
	case r == '\t', r == '\n', r == '\r':
		return r
	case r < 0x20, r == 0xFFFE, r == 0xFFFF:
		return '\uFFFD'
	}
	return r
}
