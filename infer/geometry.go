package infer

import (
	"fmt"

	"github.com/fedcalib/fedcalib/infer/data"
	"github.com/fedcalib/fedcalib/infer/resize"
)

// geometry resizes and crops image records (Preprocessing.Resize, Crop,
// Interpolation) before they are encoded, reusing its buffers.
type geometry struct {
	pre       *Preprocessing
	out       data.Record
	rs        resize.Resampler
	tmp, tmp2 []uint8
}

// active reports whether the preprocessing changes an image's size.
func (g *geometry) active() bool { return g.pre.Resize != nil || g.pre.Crop != nil }

// apply returns r resized and cropped; r itself when nothing is to be
// done. It fails on records that are not images.
func (g *geometry) apply(r *data.Record) (*data.Record, error) {
	if !g.active() {
		return r, nil
	}
	if len(r.Image) == 0 || len(r.Shape) < 2 || len(r.Shape) > 3 {
		return nil, fmt.Errorf("%s and %s apply to image records; this record is not an image", KeyResize, KeyCrop)
	}
	m := resize.Image{Pix: r.Image, H: r.Shape[0], W: r.Shape[1], C: 1}
	if len(r.Shape) == 3 {
		m.C = r.Shape[2]
	}
	if m.H == 0 || m.W == 0 {
		return nil, fmt.Errorf("cannot resize an empty %d×%d image", m.H, m.W)
	}
	h, w := m.H, m.W
	if rs := g.pre.Resize; rs != nil {
		if len(rs) == 1 {
			h, w = resize.ShorterSide(m.H, m.W, rs[0])
		} else {
			h, w = rs[0], rs[1]
		}
	}
	win := resize.Window{H: h, W: w}
	if cr := g.pre.Crop; cr != nil {
		var inside bool
		if win, inside = resize.CenterWindow(h, w, cr[0], cr[len(cr)-1]); !inside {
			win = resize.Window{H: h, W: w} // padded by CenterCrop below
		}
	}
	// torchvision returns an image of the right size unchanged; a crop
	// inside the resized image is computed with it, only its pixels.
	if h != m.H || w != m.W || win.H != h || win.W != w {
		m = g.rs.ResampleWindow(g.tmp, m, h, w, g.pre.Interpolation, win)
		g.tmp = m.Pix
	}
	if cr := g.pre.Crop; cr != nil {
		if ch, cw := cr[0], cr[len(cr)-1]; ch != m.H || cw != m.W {
			m = resize.CenterCrop(g.tmp2, m, ch, cw)
			g.tmp2 = m.Pix
		}
	}
	g.out.Image = m.Pix
	if len(r.Shape) == 3 {
		g.out.Shape = append(g.out.Shape[:0], m.H, m.W, m.C)
	} else {
		g.out.Shape = append(g.out.Shape[:0], m.H, m.W)
	}
	g.out.Label, g.out.Client = r.Label, r.Client
	return &g.out, nil
}
