package data

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestJPEGMatchesPIL decodes the JPEGs of testdata/jpeg (made by
// testdata/gen_jpeg.py) and compares the pixels with PIL's
// Image.open(f).convert("RGB") (libjpeg-turbo 2.1.5, default
// decompression), stored next to them: every value must be equal. Where
// PIL refuses a file (NAME.err: truncated, no EOI marker) decoding must
// fail with an error wrapping ErrFormat. The cases cover every chroma
// subsampling (4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, 4:1:0, chroma 2
// samples wide), gray, progressive, restart markers, arithmetic coding,
// Adobe CMYK and YCCK, and corrupt data libjpeg decodes with a warning.
// The previous decoder (a copy of image/jpeg with libjpeg's IDCT) matched
// PIL on the first nine and differed on YCCK and refused arithmetic
// coding.
func TestJPEGMatchesPIL(t *testing.T) {
	cases := []struct {
		name string
		w, h int
	}{
		{"420_5x3", 5, 3},
		{"420_17x9", 17, 9},
		{"420_3x3", 3, 3}, // chroma 2 wide: replicated, not interpolated
		{"420_16x16_progressive", 16, 16},
		{"422_17x9", 17, 9},
		{"422_5x3", 5, 3},
		{"444_17x9", 17, 9},
		{"gray_17x9", 17, 9},
		{"gray_5x3", 5, 3},
		{"411_33x17", 33, 17},
		{"440_17x9", 17, 9},
		{"410_33x17", 33, 17},
		{"420_restart_40x24", 40, 24},
		{"444_progressive_restart_24x16", 24, 16},
		{"420_arithmetic_17x9", 17, 9},
		{"gray_restart_33x17", 33, 17},
		{"cmyk_17x9", 17, 9},
		{"ycck_17x9", 17, 9},
		{"broken_corrupt", 17, 9},    // libjpeg warns and decodes; so does PIL
		{"broken_extraneous", 17, 9}, // bytes before EOI: a warning
		{"broken_trailing", 17, 9},   // bytes after EOI are never read
		{"broken_truncated", 17, 9},  // PIL: Truncated File Read
		{"broken_truncated_scan", 17, 9},
		{"broken_no_eoi", 17, 9}, // PIL: image file is truncated
	}
	dir := filepath.Join("testdata", "jpeg")
	files, _ := filepath.Glob(filepath.Join(dir, "*.jpg"))
	if len(files) != len(cases) {
		t.Errorf("%d JPEGs in %s, %d cases: every fixture needs a case", len(files), dir, len(cases))
	}
	for _, test := range cases {
		t.Run(test.name, func(t *testing.T) {
			path := filepath.Join(dir, test.name+".jpg")
			if refusal, err := os.ReadFile(filepath.Join(dir, test.name+".err")); err == nil {
				err := decodeFileErr(t, path, new(Record))
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("decoded a file PIL refuses (%s): error %v, want one wrapping ErrFormat", strings.TrimSpace(string(refusal)), err)
				}
				t.Logf("PIL: %s; fedcalib: %v", strings.TrimSpace(string(refusal)), err)
				return
			}
			want, err := os.ReadFile(filepath.Join(dir, test.name+".rgb"))
			if err != nil {
				t.Fatal(err)
			}
			rec := decodeFile(t, path)
			if !slices.Equal(rec.Shape, []int{test.h, test.w, 3}) || len(want) != len(rec.Image) {
				t.Fatalf("shape %v (%d bytes), want [%d %d 3] (%d bytes)", rec.Shape, len(rec.Image), test.h, test.w, len(want))
			}
			worst, differ := 0, 0
			for i, v := range rec.Image {
				d := max(int(v)-int(want[i]), int(want[i])-int(v))
				worst = max(worst, d)
				if d > 0 {
					differ++
				}
			}
			if differ > 0 {
				t.Errorf("%d of %d values differ from PIL's, by up to %d", differ, len(want), worst)
			}
		})
	}
}

// TestBrokenJPEGsDiffer checks that the damaged fixtures are damaged: the
// corrupt copy's pixels differ from the intact file's, so that matching
// PIL on it means matching libjpeg's recovery, not the original image.
func TestBrokenJPEGsDiffer(t *testing.T) {
	dir := filepath.Join("testdata", "jpeg")
	intact := decodeFile(t, filepath.Join(dir, "420_17x9.jpg"))
	corrupt := decodeFile(t, filepath.Join(dir, "broken_corrupt.jpg"))
	if slices.Equal(intact.Image, corrupt.Image) {
		t.Error("broken_corrupt.jpg decodes to the intact image's pixels")
	}
	for _, name := range []string{"broken_extraneous", "broken_trailing"} {
		if got := decodeFile(t, filepath.Join(dir, name+".jpg")); !slices.Equal(intact.Image, got.Image) {
			t.Errorf("%s.jpg decodes to other pixels than the intact image", name)
		}
	}
}

// decodeFile decodes one image file as the imagefolder reader does.
func decodeFile(t *testing.T, path string) Record {
	t.Helper()
	var rec Record
	if err := decodeFileErr(t, path, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// decodeFileErr decodes one image file into rec as the imagefolder reader
// does and returns the error.
func decodeFileErr(t *testing.T, path string, rec *Record) error {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := &imageFolder{br: bufio.NewReaderSize(nil, 1<<16)}
	defer r.Close()
	return r.decode(rec, path, f)
}

// jpegWithFrame returns a JPEG that holds SOI, the segments of pre (each a
// marker and its payload) and a baseline frame header of w×h pixels and
// nc components, and nothing else.
func jpegWithFrame(w, h, nc int, pre ...[]byte) []byte {
	b := []byte{0xff, 0xd8}
	for _, seg := range pre {
		b = append(b, 0xff, seg[0], byte((len(seg)+1)>>8), byte(len(seg)+1))
		b = append(b, seg[1:]...)
	}
	sof := []byte{0xff, 0xc0, 0, byte(8 + 3*nc), 8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), byte(nc)}
	for c := range nc {
		sof = append(sof, byte(c+1), 0x11, 0)
	}
	return append(b, sof...)
}

// TestScanJPEGFrame checks the frame header scan on headers written by
// hand (T.81 B.2.2: P, Y, X, Nf after the length) and its refusals.
func TestScanJPEGFrame(t *testing.T) {
	com := append([]byte{0xfe}, "a comment"...)
	for _, tc := range []struct {
		name string
		b    []byte
		want jpegFrame
		err  string
	}{
		{"baseline", jpegWithFrame(640, 480, 3), jpegFrame{640, 480, 3}, ""},
		{"after a comment", jpegWithFrame(1, 65535, 1, com), jpegFrame{1, 65535, 1}, ""},
		{"progressive", append([]byte{0xff, 0xd8, 0xff, 0xc2, 0, 11, 8, 0, 9, 0, 17, 1}, 1, 0x11, 0), jpegFrame{17, 9, 1}, ""},
		{"fill bytes and junk before a marker", append([]byte{0xff, 0xd8, 0x12, 0x00, 0xff, 0xff}, jpegWithFrame(5, 3, 4)[3:]...), jpegFrame{5, 3, 4}, ""},
		{"restart and TEM markers skipped", append([]byte{0xff, 0xd8, 0xff, 0xd0, 0xff, 0x01}, jpegWithFrame(2, 2, 3)[2:]...), jpegFrame{2, 2, 3}, ""},
		{"DHT is not a frame header", jpegWithFrame(3, 4, 3, []byte{0xc4, 0, 0, 0}), jpegFrame{3, 4, 3}, ""},
		{"empty", nil, jpegFrame{}, errNoFrame.Error()},
		{"ends in a segment", jpegWithFrame(3, 4, 3, com)[:8], jpegFrame{}, errNoFrame.Error()},
		{"ends in the frame header", jpegWithFrame(3, 4, 3)[:9], jpegFrame{}, errNoFrame.Error()},
		{"not a JPEG", []byte("\x89PNG"), jpegFrame{}, "missing SOI"},
		{"EOI first", []byte{0xff, 0xd8, 0xff, 0xd9}, jpegFrame{}, "no image before the EOI"},
		{"SOS first", []byte{0xff, 0xd8, 0xff, 0xda, 0, 2}, jpegFrame{}, "SOS marker before the frame header"},
		{"two SOI", []byte{0xff, 0xd8, 0xff, 0xd8}, jpegFrame{}, "two SOI"},
		{"bad length", []byte{0xff, 0xd8, 0xff, 0xfe, 0, 1}, jpegFrame{}, "length 1"},
		{"height 0 (DNL)", jpegWithFrame(3, 0, 3), jpegFrame{}, "declares 3×0 pixels"},
	} {
		got, err := scanJPEGFrame(tc.b)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.err)
		}
	}
}

// TestImageLimits checks that images are refused, before their pixels are
// allocated, when their header declares more than the pixel limit, and
// JPEG files larger than their declared size allows; and that an image at
// the limit decodes.
func TestImageLimits(t *testing.T) {
	intact, err := os.ReadFile(filepath.Join("testdata", "jpeg", "420_17x9.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	pngHeader := func(w, h uint32) []byte {
		b := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR")
		b = binary.BigEndian.AppendUint32(b, w)
		b = binary.BigEndian.AppendUint32(b, h)
		return append(b, 8, 2, 0, 0, 0, 0, 0, 0, 0)
	}
	// A 1×1 JPEG may take jpegHeaderBytes + 16·3 bytes: comments beyond.
	var comments []byte
	for len(comments) <= jpegHeaderBytes {
		comments = append(comments, 0xff, 0xfe, 0xff, 0xff)
		comments = append(comments, make([]byte, 0xfffd)...)
	}
	huge := append(jpegWithFrame(1, 1, 3), comments...)
	for _, tc := range []struct {
		name      string
		b         []byte
		maxPixels int
		err       string
	}{
		{"JPEG 65535×65535", jpegWithFrame(65535, 65535, 3), 0, "65535×65535 is 4294836225 pixels, more than the 178956970 PIL decodes"},
		{"JPEG 13378×13377, one pixel over", jpegWithFrame(13378, 13377, 1), 0, "178957506 pixels"},
		{"PNG 100000×100000", pngHeader(100000, 100000), 0, "100000×100000 is 10000000000 pixels"},
		{"JPEG over a lowered limit", intact, 17*9 - 1, "17×9 is 153 pixels, more than the 152"},
		{"JPEG at a lowered limit", intact, 17 * 9, ""},
		{"JPEG of 1×1 and 16 MiB of comments", huge, 0, "larger than the 16777264 bytes a 1×1 image of 3 components can take"},
	} {
		r := &imageFolder{br: bufio.NewReaderSize(nil, 1<<16), maxPixels: tc.maxPixels}
		var rec Record
		err := r.decode(&rec, "f", bytes.NewReader(tc.b))
		r.Close()
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want one wrapping ErrFormat and saying %q", tc.name, err, tc.err)
		}
	}
	if MaxImagePixels != 178956970 { // PIL: Image.MAX_IMAGE_PIXELS = 89478485, refused beyond twice that
		t.Errorf("MaxImagePixels = %d", MaxImagePixels)
	}
}

// TestJPEGConcurrent decodes the fixtures and the parity sample's JPEGs
// in 8 goroutines at once, each with its own reader (and so its own
// TurboJPEG handle), and requires every result to equal the sequential
// one: decoders share the library but no state.
func TestJPEGConcurrent(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "jpeg", "*.jpg"))
	more, _ := filepath.Glob(filepath.Join("..", "testdata", "parity", "images", "*", "*.jpg"))
	var paths []string
	for _, p := range append(files, more...) {
		if _, err := os.Stat(strings.TrimSuffix(p, ".jpg") + ".err"); err != nil {
			paths = append(paths, p)
		}
	}
	want := make([][]byte, len(paths))
	for i, p := range paths {
		want[i] = decodeFile(t, p).Image
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8*len(paths))
	for g := range 8 {
		wg.Go(func() {
			r := &imageFolder{br: bufio.NewReaderSize(nil, 1<<16)}
			defer r.Close()
			var rec Record
			for k := range 3 * len(paths) {
				i := (k + g) % len(paths)
				f, err := os.Open(paths[i])
				if err != nil {
					errs <- err.Error()
					return
				}
				err = r.decode(&rec, paths[i], f)
				f.Close()
				if err != nil || !slices.Equal(rec.Image, want[i]) {
					errs <- fmt.Sprintf("goroutine %d, %s: %v, or other pixels", g, paths[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if len(paths) < 30 {
		t.Errorf("only %d JPEGs decoded", len(paths))
	}
}
