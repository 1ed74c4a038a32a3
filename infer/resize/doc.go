// Package resize scales and crops 8-bit images the way torchvision's
// Resize and CenterCrop do on PIL images, so that a pretrained model sees
// the pixels it was evaluated on.
//
// Images are height×width×channels bytes, channels interleaved (the
// layout of data.Record.Image). Each channel is resampled on its own.
//
// # Resampling
//
// Resample follows the algorithm of PIL's Image.resize, written here from
// its description rather than its source:
//
//   - The convolution filters (Bilinear, Bicubic, Box, Hamming, Lanczos)
//     resample separably: first along rows, to an intermediate image of
//     8-bit values, then along columns; an axis whose size does not
//     change is left alone. Output sample i of an axis scaled from n to m
//     samples is centred at (i + ½)·n/m in input coordinates. When
//     shrinking, the filter's support is stretched by the factor n/m, so
//     that every input sample contributes (antialiasing); when enlarging
//     it is not. The weights of the input samples j inside the support,
//     filter((j + ½ − centre)·m/n) (or filter(j + ½ − centre) when
//     enlarging), are normalised to sum to 1 and rounded to fixed point
//     with 22 fractional bits; sums start at ½ and are clamped to 0…255.
//   - Nearest takes, for output sample i, the input sample
//     ⌊x0 + ½·n/m + i·n/m⌋, the coordinate accumulated step by step in
//     float64 as PIL's affine scaler does.
//
// # Geometry
//
// ShorterSide gives the output size of torchvision's Resize(S): the
// shorter side becomes S and the longer ⌊S·long/short⌋. CenterCrop takes
// the centred window, offsets rounded half to even as Python's round
// does, and pads with zeros where the window is larger than the image.
package resize
