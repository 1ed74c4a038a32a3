package data

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// imageKind classifies a file name by extension, following torchvision's
// IMG_EXTENSIONS: files with other extensions are ignored.
type imageKind int

const (
	notImage         imageKind = iota
	decodableImage             // .png, .jpg, .jpeg
	undecodableImage           // an image torchvision reads but the standard library does not
)

func classifyImage(name string) imageKind {
	switch strings.ToLower(path.Ext(name)) {
	case ".png", ".jpg", ".jpeg":
		return decodableImage
	case ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp":
		return undecodableImage
	}
	return notImage
}

// imageFolder reads an ImageFolder tree from a directory or a tar archive.
type imageFolder struct {
	classes []string

	// Directory mode: the images of class classIndex left to read.
	root       string
	classIndex int
	pending    []string

	// Archive mode.
	tar    *tarStream
	prefix string // root inside the archive, "" or ending in "/"
	label  map[string]int

	br        *bufio.Reader
	jpeg      jpegDecoder
	maxPixels int // the largest image decoded; 0 means MaxImagePixels
}

// openImageFolderSpec opens "PATH[:SUBDIR]".
func openImageFolderSpec(rest string) (Reader, error) {
	p, sub := splitOption(rest)
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if fi.IsDir() {
		return openImageDir(filepath.Join(p, sub))
	}
	if !isTar(p) {
		return nil, fmt.Errorf("data: %s: imagefolder wants a directory or a .tar.gz, .tgz or .tar archive", p)
	}
	return openImageTar(p, sub)
}

// openImageDir opens an ImageFolder directory: its subdirectories, sorted
// by name, are the classes.
func openImageDir(root string) (*imageFolder, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	r := &imageFolder{root: root, classIndex: -1, br: bufio.NewReaderSize(nil, 1<<16)}
	for _, e := range entries { // os.ReadDir sorts by name
		if e.IsDir() {
			r.classes = append(r.classes, e.Name())
		}
	}
	if len(r.classes) == 0 {
		return nil, fmt.Errorf("data: %s: no class subdirectories (want %s/<class>/<image>.png|jpg)", root, root)
	}
	return r, nil
}

// listClass returns the image files under dir, walked in lexical order.
func listClass(dir string) ([]string, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		switch classifyImage(p) {
		case decodableImage:
			paths = append(paths, p)
		case undecodableImage:
			return fmt.Errorf("data: %s: only PNG and JPEG images are supported; convert this file", p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("data: %s: class directory holds no PNG or JPEG image", dir)
	}
	return paths, nil
}

// openImageTar opens an ImageFolder inside a tar archive. A first pass
// over the archive lists the class names, so that labels follow the sorted
// names whatever the archive order; records then come in archive order.
func openImageTar(archive, sub string) (*imageFolder, error) {
	prefix := strings.Trim(path.Clean("/"+filepath.ToSlash(sub)), "/")
	if prefix != "" {
		prefix += "/"
	}
	t, err := openTar(archive)
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for {
		name, dir, err := t.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Close()
			return nil, err
		}
		class, rel, ok := tarClass(name, prefix, dir)
		if !ok {
			continue
		}
		if _, seen := counts[class]; !seen {
			counts[class] = 0
		}
		if rel == "" {
			continue
		}
		switch classifyImage(rel) {
		case decodableImage:
			counts[class]++
		case undecodableImage:
			t.Close()
			return nil, fmt.Errorf("data: %s: only PNG and JPEG images are supported; convert this file", member(archive, name))
		}
	}
	t.Close()
	if len(counts) == 0 {
		return nil, fmt.Errorf("data: %s: no class directories under %q in the archive", archive, "/"+prefix)
	}
	r := &imageFolder{prefix: prefix, label: map[string]int{}, br: bufio.NewReaderSize(nil, 1<<16)}
	for class := range counts {
		r.classes = append(r.classes, class)
	}
	slices.Sort(r.classes)
	for i, class := range r.classes {
		if counts[class] == 0 {
			return nil, fmt.Errorf("data: %s: class directory %s holds no PNG or JPEG image", archive, prefix+class)
		}
		r.label[class] = i
	}
	if r.tar, err = openTar(archive); err != nil {
		return nil, err
	}
	return r, nil
}

// tarClass splits an archive path below prefix into its class directory
// and the path inside it ("" for the class directory itself).
func tarClass(name, prefix string, dir bool) (class, rel string, ok bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || rest == "" {
		return "", "", false
	}
	class, rel, nested := strings.Cut(rest, "/")
	if !nested && !dir {
		return "", "", false // a file directly under the root belongs to no class
	}
	return class, rel, true
}

func (r *imageFolder) Next(rec *Record) error {
	if r.tar != nil {
		return r.nextTar(rec)
	}
	for len(r.pending) == 0 {
		if r.classIndex+1 >= len(r.classes) {
			return io.EOF
		}
		r.classIndex++
		paths, err := listClass(filepath.Join(r.root, r.classes[r.classIndex]))
		if err != nil {
			return err
		}
		r.pending = paths
	}
	p := r.pending[0]
	r.pending = r.pending[1:]
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	if err := r.decode(rec, p, f); err != nil {
		return err
	}
	rec.Label = r.classIndex
	return nil
}

func (r *imageFolder) nextTar(rec *Record) error {
	for {
		name, dir, err := r.tar.next()
		if err != nil {
			return err
		}
		class, rel, ok := tarClass(name, r.prefix, dir)
		if !ok || dir || classifyImage(rel) != decodableImage {
			continue
		}
		label, ok := r.label[class]
		if !ok {
			return fmt.Errorf("data: %s: the archive changed while being read", r.tar.name)
		}
		if err := r.decode(rec, member(r.tar.name, name), r.tar.tr); err != nil {
			return err
		}
		rec.Label = label
		return nil
	}
}

// decode decodes a PNG or JPEG image, recognised by its content, into rec
// as 8-bit RGB, the way torchvision's loader converts images to RGB: JPEG
// by libjpeg-turbo (jpegDecoder), PNG by image/png and toRGB. Images of
// more than MaxImagePixels pixels are refused before they are decoded.
func (r *imageFolder) decode(rec *Record, name string, src io.Reader) error {
	r.br.Reset(src)
	magic, _ := r.br.Peek(24)
	switch {
	case strings.HasPrefix(string(magic), "\x89PNG\r\n\x1a\n"):
		if len(magic) == 24 && string(magic[12:16]) == "IHDR" {
			w, h := binary.BigEndian.Uint32(magic[16:]), binary.BigEndian.Uint32(magic[20:])
			if pixels := uint64(w) * uint64(h); pixels > uint64(r.pixelLimit()) {
				return formatError(name, nil, "decoding image: %d×%d is %d pixels, more than the %d PIL decodes (a decompression bomb?)", w, h, pixels, r.pixelLimit())
			}
		}
		m, err := png.Decode(r.br)
		if err != nil {
			return formatError(name, err, "decoding image")
		}
		toRGB(rec, m)
		rec.Client = ""
		return nil
	case strings.HasPrefix(string(magic), "\xff\xd8"):
		return r.jpeg.decode(rec, name, r.br, r.pixelLimit())
	}
	return formatError(name, nil, "not a PNG or JPEG image")
}

// pixelLimit returns the largest image the reader decodes, in pixels:
// MaxImagePixels unless a test lowered it.
func (r *imageFolder) pixelLimit() int {
	if r.maxPixels > 0 {
		return r.maxPixels
	}
	return MaxImagePixels
}

// toRGB stores m, a decoded PNG, in rec as H×W×3 bytes, as PIL's
// convert("RGB") turns the image PIL opens into RGB:
//
//   - alpha is dropped without compositing, and a palette image takes its
//     palette's colours (transparency ignored);
//   - a 16-bit colour image keeps the high byte of each sample (PIL opens
//     it as 8-bit RGB or RGBA), but a 16-bit grayscale image is clipped
//     at 255 (PIL opens it as I;16, whose conversion to RGB clips).
func toRGB(rec *Record, m image.Image) {
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	px := rec.setImage(h, w, 3)
	i := 0
	put := func(r, g, b uint8) {
		px[i], px[i+1], px[i+2] = r, g, b
		i += 3
	}
	switch m := m.(type) {
	case *image.Gray:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for _, v := range m.Pix[m.PixOffset(b.Min.X, y):][:w] {
				put(v, v, v)
			}
		}
	case *image.Gray16:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[m.PixOffset(b.Min.X, y):]
			for x := range w {
				v := row[2*x+1] // big-endian: the low byte, clipped when the high byte is set
				if row[2*x] != 0 {
					v = 255
				}
				put(v, v, v)
			}
		}
	case *image.NRGBA:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[m.PixOffset(b.Min.X, y):]
			for x := range w {
				put(row[4*x], row[4*x+1], row[4*x+2])
			}
		}
	case *image.NRGBA64: // 16-bit RGBA or gray+alpha PNGs: high bytes
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[m.PixOffset(b.Min.X, y):]
			for x := range w {
				put(row[8*x], row[8*x+2], row[8*x+4])
			}
		}
	case *image.RGBA64: // 16-bit RGB PNGs, opaque: high bytes
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[m.PixOffset(b.Min.X, y):]
			for x := range w {
				put(row[8*x], row[8*x+2], row[8*x+4])
			}
		}
	case *image.Paletted:
		pal := make([][3]uint8, len(m.Palette))
		for k, c := range m.Palette {
			pal[k] = paletteRGB(c)
		}
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for _, k := range m.Pix[m.PixOffset(b.Min.X, y):][:w] {
				c := pal[k]
				put(c[0], c[1], c[2])
			}
		}
	case *image.RGBA:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.NRGBAModel.Convert(m.RGBAAt(x, y)).(color.NRGBA)
				put(c.R, c.G, c.B)
			}
		}
	default:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.NRGBA64Model.Convert(m.At(x, y)).(color.NRGBA64)
				put(uint8(c.R>>8), uint8(c.G>>8), uint8(c.B>>8))
			}
		}
	}
}

// paletteRGB returns the stored red, green and blue of a palette entry
// as image/png builds them: opaque entries are color.RGBA, entries with
// transparency color.NRGBA, whose colour is not premultiplied.
func paletteRGB(c color.Color) [3]uint8 {
	switch c := c.(type) {
	case color.NRGBA:
		return [3]uint8{c.R, c.G, c.B}
	case color.RGBA:
		if c.A == 255 {
			return [3]uint8{c.R, c.G, c.B}
		}
	}
	n := color.NRGBAModel.Convert(c).(color.NRGBA)
	return [3]uint8{n.R, n.G, n.B}
}

// cmykChannel returns one RGB channel of a CMYK pixel as PIL's
// convert("RGB") computes it, R = (255 − K) − (255 − K)·C/255:
// nk − nk·v/255 with nk = 255 − k, the product divided by 255 with
// rounding as PIL's MULDIV255 does, (t + t>>8) >> 8 for t = nk·v + 128.
func cmykChannel(v, k uint8) uint8 {
	nk := 255 - int(k)
	t := nk*int(v) + 128
	return uint8(max(0, nk-((t>>8)+t)>>8))
}

func (r *imageFolder) Classes() []string { return classesCopy(r.classes) }

func (r *imageFolder) Close() error {
	r.pending = nil
	r.jpeg.close()
	if r.tar != nil {
		err := r.tar.Close()
		r.tar = nil
		return err
	}
	return nil
}
