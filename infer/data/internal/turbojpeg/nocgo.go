//go:build !cgo

package turbojpeg

// Decoder decodes JPEG images; in a build without cgo there is none.
type Decoder struct{}

// NewDecoder returns an error wrapping ErrNotFound: a build without cgo
// cannot load the library.
func NewDecoder() (*Decoder, error) {
	_, err := spec.Open(Library)
	return nil, err
}

// Close does nothing.
func (d *Decoder) Close() {}

// Decode panics: NewDecoder returns no Decoder in a build without cgo.
func (d *Decoder) Decode(dst, src []byte, width, height int, f Format) (warning string, err error) {
	panic("turbojpeg: Decode in a build without cgo")
}
