package ljpeg

// A block is an 8×8 block of DCT coefficients, dequantized and in natural
// (row-major) order by the time it reaches idctISlow.
type block [blockSize]int32

const blockSize = 8 * 8

// The fixed-point constants of libjpeg's accurate integer IDCT
// (jidctint.c, JDCT_ISLOW), FIX(x) = ⌊x·2¹³ + ½⌋, and its scalings: the
// column pass keeps pass1Bits extra bits, the row pass removes them and
// the IDCT's factor 8.
const (
	constBits = 13
	pass1Bits = 2

	fix0298631336 = 2446  // FIX(0.298631336)
	fix0390180644 = 3196  // FIX(0.390180644)
	fix0541196100 = 4433  // FIX(0.541196100)
	fix0765366865 = 6270  // FIX(0.765366865)
	fix0899976223 = 7373  // FIX(0.899976223)
	fix1175875602 = 9633  // FIX(1.175875602)
	fix1501321110 = 12299 // FIX(1.501321110)
	fix1847759065 = 15137 // FIX(1.847759065)
	fix1961570560 = 16069 // FIX(1.961570560)
	fix2053119869 = 16819 // FIX(2.053119869)
	fix2562915447 = 20995 // FIX(2.562915447)
	fix3072711026 = 25172 // FIX(3.072711026)
)

// descale divides x by 2ⁿ, rounding halves up, as libjpeg's DESCALE,
// and truncates the result to 32 bits, as libjpeg's int casts do.
func descale(x int64, n uint) int32 {
	return int32((x + 1<<(n-1)) >> n)
}

// idct1D is the 1-D 8-point IDCT of libjpeg's islow method (the
// Loeffler–Ligtenberg–Moschytz algorithm with 12 multiplies), applied to
// in[0], in[s], …, in[7s]. It returns the eight outputs before
// descaling, in units of 2^-constBits, computed in 64 bits as libjpeg's
// JLONG arithmetic is on LP64 systems.
func idct1D(in []int32, s int) (out [8]int64) {
	// Even part: the rotation by √2·c6 of inputs 2 and 6, and inputs 0
	// and 4.
	z2, z3 := int64(in[2*s]), int64(in[6*s])
	z1 := (z2 + z3) * fix0541196100
	e2 := z1 - z3*fix1847759065
	e3 := z1 + z2*fix0765366865
	i0, i4 := int64(in[0]), int64(in[4*s])
	e0 := (i0 + i4) << constBits
	e1 := (i0 - i4) << constBits
	t10, t13 := e0+e3, e0-e3
	t11, t12 := e1+e2, e1-e2

	// Odd part: inputs 7, 5, 3 and 1.
	o0, o1, o2, o3 := int64(in[7*s]), int64(in[5*s]), int64(in[3*s]), int64(in[1*s])
	s1, s2, s3, s4 := o0+o3, o1+o2, o0+o2, o1+o3
	z5 := (s3 + s4) * fix1175875602
	o0 *= fix0298631336
	o1 *= fix2053119869
	o2 *= fix3072711026
	o3 *= fix1501321110
	s1 *= -fix0899976223
	s2 *= -fix2562915447
	s3 = s3*-fix1961570560 + z5
	s4 = s4*-fix0390180644 + z5
	o0 += s1 + s3
	o1 += s2 + s4
	o2 += s2 + s3
	o3 += s1 + s4

	return [8]int64{t10 + o3, t11 + o2, t12 + o1, t13 + o0, t13 - o0, t12 - o1, t11 - o2, t10 - o3}
}

// rangeLimit level-shifts a descaled IDCT output by +128 and limits it
// to [0, 255] as libjpeg's post-IDCT range-limit table does: indexed by
// x mod 1024, it clamps x in [-512, 511] and wraps values outside, which
// only corrupt data produces.
func rangeLimit(x int32) uint8 {
	m := x & 1023
	switch {
	case m < 128:
		return uint8(m + 128)
	case m < 512:
		return 255
	case m < 896:
		return 0
	}
	return uint8(m - 896)
}

// idctISlow computes the inverse DCT of the dequantized coefficients b
// as libjpeg's jpeg_idct_islow does, columns first and then rows, and
// writes the 8×8 level-shifted samples to dst, rows stride apart.
func idctISlow(b *block, dst []byte, stride int) {
	var ws [blockSize]int32
	for x := range 8 {
		col := b[x:]
		if col[8] == 0 && col[16] == 0 && col[24] == 0 && col[32] == 0 && col[40] == 0 && col[48] == 0 && col[56] == 0 {
			dc := col[0] << pass1Bits
			for y := range 8 {
				ws[8*y+x] = dc
			}
			continue
		}
		out := idct1D(col, 8)
		for y, v := range out {
			ws[8*y+x] = descale(v, constBits-pass1Bits)
		}
	}
	for y := range 8 {
		row := ws[8*y : 8*y+8]
		o := dst[y*stride : y*stride+8]
		if row[1] == 0 && row[2] == 0 && row[3] == 0 && row[4] == 0 && row[5] == 0 && row[6] == 0 && row[7] == 0 {
			v := rangeLimit(descale(int64(row[0]), pass1Bits+3))
			for x := range o {
				o[x] = v
			}
			continue
		}
		out := idct1D(row, 1)
		for x, v := range out {
			o[x] = rangeLimit(descale(v, constBits+pass1Bits+3))
		}
	}
}
