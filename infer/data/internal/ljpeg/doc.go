// Package ljpeg decodes JPEG images to the samples libjpeg's default
// decompression produces.
//
// It is Go 1.26.8's image/jpeg decoder (reader.go, huffman.go, scan.go,
// under Go's BSD license, in LICENSE) with these changes: blocks go
// through libjpeg's accurate integer inverse DCT (jidctint.c,
// JDCT_ISLOW, the default of libjpeg and libjpeg-turbo, which PIL uses)
// and its post-IDCT range limit instead of Go's IDCT and clamp (islow.go);
// the encoder is left out; the package registers no image format; and
// CMYK images with Adobe's YCCK transform are drawn with image/draw. The
// returned planes are therefore libjpeg's, bit for bit, as far as the
// coefficients decode alike; chroma upsampling and color conversion are
// left to the caller, as image/jpeg leaves them (package data does them
// libjpeg's way).
//
// JPEG is defined in ITU-T T.81: https://www.w3.org/Graphics/JPEG/itu-t81.pdf.
package ljpeg
