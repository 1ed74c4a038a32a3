package logits

// Row access: with Len, the methods below let a File be read one row at a
// time in place (it implements federation.RowSource), so that callers
// convert to float64 only the rows they use, a chunk or a client at a
// time, instead of copying the whole float32 block.

// NumClasses returns the number of classes C (the field Classes).
func (f *File) NumClasses() int { return f.Classes }

// Label returns the class of row i. It panics if i is out of range.
func (f *File) Label(i int) int { return int(f.Labels[i]) }

// Row writes the logits of row i, converted to float64, into dst, which
// must hold at least Classes values. Conversion from float32 is exact. It
// panics if i is out of range.
func (f *File) Row(dst []float64, i int) {
	c := f.Classes
	src := f.Logits[i*c : (i+1)*c]
	dst = dst[:c]
	for j, v := range src {
		dst[j] = float64(v)
	}
}

// IntLabels returns a copy of the labels as []int.
func (f *File) IntLabels() []int {
	out := make([]int, len(f.Labels))
	for i, y := range f.Labels {
		out[i] = int(y)
	}
	return out
}
