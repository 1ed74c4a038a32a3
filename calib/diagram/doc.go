// Package diagram draws reliability diagrams as the calibration literature
// draws them, as PNG and SVG images with gonum/plot.
//
// A reliability diagram bins examples by confidence and plots, per bin,
// the observed accuracy against the mean confidence; a perfectly
// calibrated model lies on the diagonal. Outcomes holds the data (the
// top-label outcomes of TopLabel, or one class's of OneVsRest), binned by
// Outcomes.Bins into equal-width or equal-mass bins.
//
// Reliability draws the diagrams of Guo et al. (2017) and netcal: a bar of
// accuracy per bin, the gap to the bin's mean confidence shaded red, the
// histogram of bin counts beneath with every count written, and the bins
// too small to trust (Options.MinCount) faint with dashed edges; several
// curves (before and after calibration) side by side, the legend above
// them so that it never covers data. Classes draws per-class small
// multiples. Smooth and Smooths give the smoothed (kernel) diagram of
// Błasiok & Nakkiran (2023), as relplot draws it: a Nadaraya–Watson curve
// whose thickness shows the density of confidences, with a bootstrap
// band, and the smooth ECE at relplot's bandwidth.
//
// Every function returns a Figure, rendered by Figure.SVG, Figure.PNG or
// Figure.WriteFiles; Write draws the figures of `fedcalib eval --plot`.
// The same data give the same bytes: testdata holds golden SVGs of fixed
// logits (go test -run Golden -update rewrites them).
package diagram
