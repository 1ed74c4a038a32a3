//go:build !cgo

package deflate

// Decompressor inflates gzip data; in a build without cgo there is none,
// and the zero value is unusable.
type Decompressor struct{}

// NewDecompressor returns an error wrapping ErrNotFound: a build without
// cgo cannot load the library.
func NewDecompressor() (*Decompressor, error) {
	_, err := spec.Open(Library)
	return nil, err
}

// Close does nothing.
func (d *Decompressor) Close() {}

// Gunzip panics: NewDecompressor returns no Decompressor in a build
// without cgo.
func (d *Decompressor) Gunzip(dst, src []byte) (int, error) {
	panic("deflate: Gunzip in a build without cgo")
}
