package calib

import "math"

// Softmax writes softmax(z) into dst, which must have len(z). It subtracts
// the maximum first, so it is finite for any finite z. dst may alias z.
func Softmax(dst, z []float64) {
	if len(dst) != len(z) {
		panic("calib: Softmax length mismatch")
	}
	// max, branch-free, where v > m was: the same m but for the sign
	// of a zero, which changes no v − m and so no probability; a NaN
	// gives NaN probabilities either way.
	m := math.Inf(-1)
	for _, v := range z {
		m = max(m, v)
	}
	var sum float64
	for i, v := range z {
		e := math.Exp(v - m)
		dst[i] = e
		sum += e
	}
	for i := range dst {
		dst[i] /= sum
	}
}

// LogSoftmax writes log softmax(z) into dst, which must have len(z), using
// the log-sum-exp trick. dst may alias z.
func LogSoftmax(dst, z []float64) {
	if len(dst) != len(z) {
		panic("calib: LogSoftmax length mismatch")
	}
	lse := LogSumExp(z)
	for i, v := range z {
		dst[i] = v - lse
	}
}

// LogSumExp returns log Σ exp(z_i), computed stably. It returns -Inf for an
// empty z.
func LogSumExp(z []float64) float64 {
	m := math.Inf(-1)
	for _, v := range z {
		if v > m {
			m = v
		}
	}
	if math.IsInf(m, -1) {
		return m
	}
	var sum float64
	for _, v := range z {
		sum += math.Exp(v - m)
	}
	return m + math.Log(sum)
}

// SoftmaxRows writes the row-wise softmax of the n×c matrix z into dst.
func SoftmaxRows(dst, z []float64, c int) {
	if len(dst) != len(z) || c <= 0 || len(z)%c != 0 {
		panic("calib: SoftmaxRows shape mismatch")
	}
	for i := 0; i < len(z); i += c {
		Softmax(dst[i:i+c], z[i:i+c])
	}
}
