package diagram

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/fedcalib/fedcalib/internal/fileio"
)

// Figure is a drawing of a fixed size, rendered on demand as SVG or PNG.
// The zero value draws nothing and renders as an error.
type Figure struct {
	// Width and Height are the figure's size.
	Width, Height vg.Length
	draw          func(draw.Canvas)
}

// render draws f onto c.
func (f Figure) render(c vg.CanvasSizer) error {
	if f.draw == nil || f.Width <= 0 || f.Height <= 0 {
		return fmt.Errorf("diagram: empty figure")
	}
	f.draw(draw.New(c))
	return nil
}

// SVG returns f as a standalone SVG document; its fonts are named, not
// embedded.
func (f Figure) SVG() ([]byte, error) {
	if f.Width <= 0 || f.Height <= 0 {
		return nil, fmt.Errorf("diagram: empty figure")
	}
	c := vgsvg.New(f.Width, f.Height)
	if err := f.render(c); err != nil {
		return nil, err
	}
	return writeTo(c)
}

// PNG returns f as a PNG image at vgimg's default 96 dots per inch.
func (f Figure) PNG() ([]byte, error) {
	if f.Width <= 0 || f.Height <= 0 {
		return nil, fmt.Errorf("diagram: empty figure")
	}
	c := vgimg.New(f.Width, f.Height)
	if err := f.render(c); err != nil {
		return nil, err
	}
	return writeTo(vgimg.PngCanvas{Canvas: c})
}

func writeTo(w io.WriterTo) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteFiles writes f as base.png and base.svg (base is a path without
// extension), atomically each, and returns the two paths.
func (f Figure) WriteFiles(base string) ([]string, error) {
	var written []string
	for _, out := range []struct {
		ext    string
		render func() ([]byte, error)
	}{{".png", f.PNG}, {".svg", f.SVG}} {
		b, err := out.render()
		if err != nil {
			return written, err
		}
		path := filepath.Clean(base + out.ext)
		if err := fileio.Write(path, b); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}
