package data

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/fedcalib/fedcalib/infer/data/internal/turbojpeg"
)

// JPEG images are decoded by libjpeg-turbo (see "JPEG decoding" in
// doc.go): this file reads a JPEG into memory, checks its size against
// the limits below before anything is allocated for its pixels, and
// converts libjpeg's output to RGB as PIL's convert("RGB") does.

// ErrJPEGLibrary is wrapped by the errors that mean the library that
// decodes JPEG images (libjpeg-turbo's TurboJPEG, Debian's libturbojpeg0)
// is missing or cannot be loaded: a fault of the machine, not of the
// data. The error says how to install the library.
var ErrJPEGLibrary = turbojpeg.ErrNotFound

// JPEGLibraryEnv is the environment variable that names the TurboJPEG
// library file to load instead of libturbojpeg.so.0 from the system's
// library path.
const JPEGLibraryEnv = turbojpeg.LibraryEnv

// MaxImagePixels is the largest image, in pixels, that is decoded: PIL's
// DecompressionBombError threshold, 2·Image.MAX_IMAGE_PIXELS =
// 2·⌊2³⁰/4/3⌋ = 178,956,970, beyond which PIL, and so torchvision's
// loader, refuses an image. A PNG or JPEG whose header declares more is
// refused before its pixels are allocated.
const MaxImagePixels = 2 * (1 << 30 / 4 / 3)

// JPEG files are read into memory whole. jpegHeaderBytes bounds the bytes
// read while looking for the frame header, and the whole file may hold
// jpegHeaderBytes plus jpegBytesPerSample bytes for each sample (pixel ×
// component) the header declares: a Huffman-coded 8×8 block takes at most
// 64 codes of 16 bits plus 11 magnitude bits, 3.4 bytes a sample, and
// progressive refinement adds at most 13 bits a coefficient, so no
// encoder writes a file beyond the bound (a file of hundreds of redundant
// scans could; PIL would decode it, fedcalib refuses it).
const (
	jpegHeaderBytes    = 16 << 20
	jpegBytesPerSample = 16
)

// jpegFrame is what decodeJPEG needs of a JPEG's frame (SOF) header.
type jpegFrame struct {
	width, height, components int
}

// errNoFrame is returned by scanJPEGFrame when the data ends before the
// frame header.
var errNoFrame = errors.New("no frame header")

// scanJPEGFrame finds the frame header of the JPEG b (ITU-T T.81, B.2):
// after SOI, marker segments are skipped by their lengths until a SOFn
// marker. Like libjpeg's marker reader (jdmarker.c next_marker) it skips
// bytes other than 0xFF before a marker, fill bytes 0xFF, and FF 00
// pairs, and treats RSTn and TEM as markers without a segment. It returns
// errNoFrame when b ends first, so that the caller can read more.
func scanJPEGFrame(b []byte) (jpegFrame, error) {
	if len(b) < 2 {
		return jpegFrame{}, errNoFrame
	}
	if b[0] != 0xff || b[1] != 0xd8 {
		return jpegFrame{}, errors.New("missing SOI marker")
	}
	i := 2
	for {
		for i < len(b) && b[i] != 0xff { // data between segments
			i++
		}
		for i < len(b) && b[i] == 0xff { // the marker's 0xFF and fill bytes
			i++
		}
		if i >= len(b) {
			return jpegFrame{}, errNoFrame
		}
		m := b[i]
		i++
		switch {
		case m == 0x00, m == 0x01, m >= 0xd0 && m <= 0xd7: // stuffed zero, TEM, RSTn
			continue
		case m == 0xd8:
			return jpegFrame{}, errors.New("two SOI markers")
		case m == 0xd9:
			return jpegFrame{}, errors.New("no image before the EOI marker")
		case m == 0xda:
			return jpegFrame{}, errors.New("SOS marker before the frame header")
		}
		if i+2 > len(b) {
			return jpegFrame{}, errNoFrame
		}
		n := int(b[i])<<8 | int(b[i+1]) // segment length, its own 2 bytes included
		if n < 2 {
			return jpegFrame{}, fmt.Errorf("marker 0x%02X has length %d", m, n)
		}
		if m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc { // SOFn, not DHT, JPG, DAC
			if i+8 > len(b) {
				return jpegFrame{}, errNoFrame
			}
			f := jpegFrame{
				height:     int(b[i+3])<<8 | int(b[i+4]),
				width:      int(b[i+5])<<8 | int(b[i+6]),
				components: int(b[i+7]),
			}
			if f.width == 0 || f.height == 0 {
				return jpegFrame{}, fmt.Errorf("frame header declares %d×%d pixels", f.width, f.height)
			}
			return f, nil
		}
		i += n
	}
}

// jpegDecoder decodes JPEG files for one reader; it is not safe for
// concurrent use. The zero value is ready: the library is loaded and a
// TurboJPEG handle made at the first JPEG.
type jpegDecoder struct {
	dec  *turbojpeg.Decoder
	buf  []byte // the file being decoded, then jpegSentinel
	cmyk []byte // libjpeg's CMYK pixels of the last CMYK JPEG
}

// jpegSentinel is appended to every JPEG given to libjpeg. libjpeg reads
// past a file's last byte only when the file ends before its image does;
// it then meets a second SOI marker, which it rejects as an error. PIL
// refuses such truncated files too ("image file is truncated"), whereas
// libjpeg's own handling of the end of data (a warning, and the missing
// rows in gray) would accept them.
const jpegSentinel = "\xff\xd8"

// close frees the TurboJPEG handle.
func (j *jpegDecoder) close() {
	if j.dec != nil {
		j.dec.Close()
		j.dec = nil
	}
}

// decode reads a JPEG file from br and stores its pixels in rec as 8-bit
// RGB, as PIL's Image.open(f).convert("RGB") decodes it, refusing images
// of more than maxPixels pixels. name is the file named in errors. Errors
// caused by the file wrap ErrFormat; an error wrapping ErrJPEGLibrary
// means the library is missing.
func (j *jpegDecoder) decode(rec *Record, name string, br *bufio.Reader, maxPixels int) error {
	frame, err := j.read(name, br, maxPixels)
	if err != nil {
		return err
	}
	format := turbojpeg.RGB
	switch frame.components {
	case 1, 3:
	case 4:
		format = turbojpeg.CMYK
	default: // as PIL, which opens 1-, 3- and 4-component JPEGs only
		return formatError(name, nil, "decoding JPEG: %d-component images are not supported", frame.components)
	}
	if j.dec == nil {
		if j.dec, err = turbojpeg.NewDecoder(); err != nil {
			return fmt.Errorf("data: %s: %w", name, err)
		}
	}
	w, h := frame.width, frame.height
	dst := rec.setImage(h, w, 3)
	if format == turbojpeg.CMYK {
		if n := 4 * w * h; cap(j.cmyk) < n {
			j.cmyk = make([]byte, n)
		}
		j.cmyk = j.cmyk[:4*w*h]
		dst = j.cmyk
	}
	warning, err := j.dec.Decode(dst, j.buf, w, h, format)
	if err != nil {
		if err.Error() == jpegSOIError {
			return formatError(name, nil, "decoding JPEG: the file is truncated, or holds a second SOI marker (%s)", err)
		}
		return formatError(name, nil, "decoding JPEG: %s", err)
	}
	if warning == jpegEOFWarning {
		return formatError(name, nil, "decoding JPEG: the file is truncated (%s)", warning)
	}
	if format == turbojpeg.CMYK {
		adobeCMYKToRGB(rec.Image, j.cmyk)
	}
	rec.Client = ""
	return nil
}

// jpegSOIError is libjpeg's error JERR_SOI_DUPLICATE, which jpegSentinel
// causes when the file ends before its image does.
const jpegSOIError = "Invalid JPEG file structure: two SOI markers"

// jpegEOFWarning is libjpeg's warning JWRN_JPEG_EOF, given when the data
// ends before the image does (a truncation jpegSentinel did not turn into
// an error: within a marker segment).
const jpegEOFWarning = "Premature end of JPEG file"

// read reads the JPEG file at br into j.buf, followed by jpegSentinel, and
// returns its frame header, refusing images of more than maxPixels pixels
// and files above the byte limit before reading them whole.
func (j *jpegDecoder) read(name string, br *bufio.Reader, maxPixels int) (jpegFrame, error) {
	j.buf = j.buf[:0]
	var frame jpegFrame
	for {
		var err error
		frame, err = scanJPEGFrame(j.buf)
		if err == nil {
			break
		}
		if !errors.Is(err, errNoFrame) || len(j.buf) >= jpegHeaderBytes {
			if errors.Is(err, errNoFrame) {
				err = fmt.Errorf("no frame header in the first %d bytes", len(j.buf))
			}
			return frame, formatError(name, err, "decoding JPEG")
		}
		n, err := j.fill(br, min(len(j.buf)+64<<10, jpegHeaderBytes))
		if err != nil {
			return frame, formatError(name, err, "reading JPEG")
		}
		if n == 0 {
			return frame, formatError(name, nil, "decoding JPEG: the file is truncated (it ends before the frame header)")
		}
	}
	if pixels := frame.width * frame.height; pixels > maxPixels {
		return frame, formatError(name, nil, "decoding JPEG: %d×%d is %d pixels, more than the %d PIL decodes (a decompression bomb?)",
			frame.width, frame.height, pixels, maxPixels)
	}
	limit := jpegHeaderBytes + jpegBytesPerSample*frame.width*frame.height*max(frame.components, 1)
	for {
		n, err := j.fill(br, min(max(2*len(j.buf), 64<<10), limit+1))
		if err != nil {
			return frame, formatError(name, err, "reading JPEG")
		}
		if len(j.buf) > limit {
			return frame, formatError(name, nil, "decoding JPEG: the file is larger than the %d bytes a %d×%d image of %d components can take",
				limit, frame.width, frame.height, frame.components)
		}
		if n == 0 {
			break
		}
	}
	j.buf = append(j.buf, jpegSentinel...)
	return frame, nil
}

// fill reads from br into j.buf until it holds size bytes or br ends, and
// returns the number of bytes read; 0 with a nil error means br had
// ended.
func (j *jpegDecoder) fill(br *bufio.Reader, size int) (int, error) {
	if cap(j.buf) < size {
		j.buf = append(make([]byte, 0, size), j.buf...)
	}
	start := len(j.buf)
	n, err := io.ReadFull(br, j.buf[start:size])
	j.buf = j.buf[:start+n]
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	return n, err
}

// adobeCMYKToRGB converts libjpeg's CMYK pixels to RGB as PIL does. PIL
// reads every 4-component JPEG as Adobe's inverted CMYK (JpegImagePlugin's
// rawmode "CMYK;I": each stored value v means 255 − v), then
// convert("RGB") applies cmykChannel.
func adobeCMYKToRGB(dst, cmyk []byte) {
	for i := range len(cmyk) / 4 {
		s := cmyk[4*i : 4*i+4 : 4*i+4]
		k := 255 - s[3]
		d := dst[3*i : 3*i+3 : 3*i+3]
		d[0], d[1], d[2] = cmykChannel(255-s[0], k), cmykChannel(255-s[1], k), cmykChannel(255-s[2], k)
	}
}
