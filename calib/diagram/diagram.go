package diagram

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/fedcalib/fedcalib/calib"
)

// Options controls the figures. The zero value draws at most 16 classes,
// names classes by index, titles Write's curves "uncalibrated" and
// "calibrated", and draws faint the bins with fewer than max(10, ⌈N/100⌉)
// of a panel's N examples.
type Options struct {
	// ClassNames names the classes in label order; classes beyond its
	// length are named by index.
	ClassNames []string
	// MaxClasses caps the classes drawn in the per-class grid (the first
	// MaxClasses classes); 0 means 16.
	MaxClasses int
	// Title names Write's calibrated curve (a method, say); "" means
	// "calibrated".
	Title string
	// MinCount is the number of examples below which a bin is drawn
	// faint, as too few to trust; 0 means max(10, ⌈N/100⌉) for a panel of
	// N examples.
	MinCount int
}

// Write draws the top-label and per-class reliability diagrams of before
// (and of after, when it is not nil, side by side) from their
// equal-width bins into dir as top.png, top.svg, classes.png and
// classes.svg, creating dir if needed, and returns the paths written.
// before and after must have the same number of classes.
func Write(dir string, before, after *calib.Reliability, opt Options) ([]string, error) {
	if before == nil {
		return nil, fmt.Errorf("diagram: no reliability data")
	}
	if after != nil && len(after.Class) != len(before.Class) {
		return nil, fmt.Errorf("diagram: before has %d classes, after %d", len(before.Class), len(after.Class))
	}
	title := opt.Title
	if title == "" {
		title = "calibrated"
	}
	rels := []*calib.Reliability{before}
	labels := []string{"uncalibrated"}
	if after != nil {
		rels, labels = append(rels, after), append(labels, title)
	}
	var curves []Curve
	var sets []CurveSet
	for i, r := range rels {
		curves = append(curves, Curve{Label: labels[i], Bins: FromReliability(r.Top)})
		s := CurveSet{Label: labels[i]}
		for _, c := range r.Class {
			s.Classes = append(s.Classes, FromReliability(c))
		}
		sets = append(sets, s)
	}
	top, err := Reliability(curves, opt)
	if err != nil {
		return nil, err
	}
	classes, err := Classes(sets, opt)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, f := range []struct {
		name string
		fig  Figure
	}{{"top", top}, {"classes", classes}} {
		paths, err := f.fig.WriteFiles(filepath.Join(dir, f.name))
		written = append(written, paths...)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}
