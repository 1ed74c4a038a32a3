// Package diagram draws reliability diagrams of calibration.Reliability data
// as PNG and SVG images with gonum/plot.
//
// A reliability diagram plots, for each non-empty confidence bin, the mean
// predicted probability (x) against the observed frequency (y); a
// perfectly calibrated model lies on the diagonal. Write draws the
// top-label diagram and a grid of per-class diagrams, each with the curve
// before calibration and, when given, the curve after it.
package diagram
