package data

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// IDX element types (the third byte of the magic number).
const idxUint8 = 0x08

// maxRecordBytes bounds the size of one record read from a header, so that
// a corrupt header cannot make a reader allocate gigabytes.
const maxRecordBytes = 1 << 28

// fashionClasses are the class names of Fashion-MNIST.
var fashionClasses = []string{
	"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
	"Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
}

// idxReader reads an IDX image file and its IDX label file in step.
type idxReader struct {
	images, labels   io.Reader
	imgName, lblName string
	closers          []io.Closer
	n, i             int
	h, w, c          int
	classes          []string
	labelBuf         [1]byte
}

// openMNIST opens "DIR[:train|test]" with the given class names (nil for
// the digits).
func openMNIST(rest string, classes []string) (Reader, error) {
	dir, option := splitOption(rest)
	if option == "all" {
		return openMNISTAll(dir, classes)
	}
	sp, err := split(rest, option)
	if err != nil {
		return nil, fmt.Errorf("data: %s: unknown split %q (want train, test, or all for train then test)", rest, option)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("data: %s is not a directory: give the folder of the MNIST IDX files (for the MNIST that make setup downloads: mnist:$(make -s mnist-dir))", dir)
	}
	prefix := "train"
	if sp == "test" {
		prefix = "t10k" // MNIST's name for its test files
	}
	images := findMNIST(dir, prefix)
	if images == "" {
		return nil, fmt.Errorf("data: %s: no %s-images-idx3-ubyte[.gz] in this directory: give the folder that holds the MNIST IDX files", dir, prefix)
	}
	if classes == nil {
		classes = digitClasses
	}
	return openIDX(images, idxLabelsName(images), classes)
}

// findMNIST returns the path of the images file for prefix (train or
// t10k) in dir, or "" when there is none.
func findMNIST(dir, prefix string) string {
	for _, base := range []string{prefix + "-images-idx3-ubyte", prefix + "-images.idx3-ubyte"} {
		for _, ext := range []string{"", ".gz"} {
			p := filepath.Join(dir, base+ext)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
				return p
			}
		}
	}
	return ""
}

// idxLabelsName derives the label file name from an image file name, or
// returns "" when the name does not follow the MNIST convention. When the
// derived name does not exist, the name with ".gz" added or removed is
// returned if that one does, since the two files need not share a
// compression.
func idxLabelsName(images string) string {
	dir, base := filepath.Split(images)
	for _, r := range [][2]string{{"images-idx3", "labels-idx1"}, {"images.idx3", "labels.idx1"}} {
		if !strings.Contains(base, r[0]) {
			continue
		}
		name := dir + strings.Replace(base, r[0], r[1], 1)
		alt := name + ".gz"
		if trimmed, ok := strings.CutSuffix(name, ".gz"); ok {
			alt = trimmed
		}
		if fileSize(name) < 0 && fileSize(alt) >= 0 {
			return alt
		}
		return name
	}
	return ""
}

// openIDXSpec opens "IMAGES[,LABELS]".
func openIDXSpec(rest string) (Reader, error) {
	images, labels := splitPair(rest)
	if labels == "" {
		labels = idxLabelsName(images)
		if labels == "" {
			return nil, fmt.Errorf("data: %s: cannot derive the label file name; give it as idx:IMAGES,LABELS", images)
		}
	}
	return openIDX(images, labels, nil)
}

// openIDX opens an IDX image file and its label file.
func openIDX(images, labels string, classes []string) (Reader, error) {
	is, err := openStream(images, true)
	if err != nil {
		return nil, err
	}
	ls, err := openStream(labels, true)
	if err != nil {
		is.Close()
		return nil, err
	}
	r, err := newIDXReader(is, ls, images, labels, classes)
	if err != nil {
		is.Close()
		ls.Close()
		return nil, err
	}
	r.closers = []io.Closer{is, ls}
	return r, nil
}

// newIDXReader reads the IDX headers of images and labels and returns a
// reader positioned at the first record.
func newIDXReader(images, labels io.Reader, imgName, lblName string, classes []string) (*idxReader, error) {
	idims, err := readIDXHeader(images, imgName)
	if err != nil {
		return nil, err
	}
	ldims, err := readIDXHeader(labels, lblName)
	if err != nil {
		return nil, err
	}
	r := &idxReader{images: images, labels: labels, imgName: imgName, lblName: lblName, classes: classes}
	switch len(idims) {
	case 3:
		r.h, r.w, r.c = idims[1], idims[2], 1
	case 4:
		r.h, r.w, r.c = idims[1], idims[2], idims[3]
	default:
		return nil, formatError(imgName, nil, "image file has %d dimensions, want 3 (N×H×W) or 4 (N×H×W×C)", len(idims))
	}
	if _, ok := recordSize(1, r.h, r.w, r.c); !ok {
		return nil, formatError(imgName, nil, "unsupported image size %d×%d×%d", r.h, r.w, r.c)
	}
	if len(ldims) != 1 {
		return nil, formatError(lblName, nil, "label file has %d dimensions, want 1", len(ldims))
	}
	if idims[0] != ldims[0] {
		return nil, formatError(lblName, nil, "%d labels for %d images in %s", ldims[0], idims[0], imgName)
	}
	r.n = idims[0]
	return r, nil
}

// readIDXHeader reads the magic number and dimensions of an unsigned-byte
// IDX file.
func readIDXHeader(r io.Reader, name string) ([]int, error) {
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return nil, formatError(name, eofError(err), "reading IDX header")
	}
	if magic[0] != 0 || magic[1] != 0 {
		return nil, formatError(name, nil, "not an IDX file (magic %x; a gzip file is decompressed automatically)", magic)
	}
	if magic[2] != idxUint8 {
		return nil, formatError(name, nil, "IDX element type 0x%02x is not supported (want 0x08, unsigned byte)", magic[2])
	}
	nd := int(magic[3])
	if nd < 1 || nd > 4 {
		return nil, formatError(name, nil, "IDX file has %d dimensions, want 1 to 4", nd)
	}
	buf := make([]byte, 4*nd)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, formatError(name, eofError(err), "reading IDX dimensions")
	}
	dims := make([]int, nd)
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(buf[4*i:]))
	}
	return dims, nil
}

func (r *idxReader) Next(rec *Record) error {
	if r.i == r.n {
		return io.EOF
	}
	if err := rec.readImage(r.images, r.h, r.w, r.c); err != nil {
		return formatError(r.imgName, err, "image %d of %d", r.i, r.n)
	}
	if _, err := io.ReadFull(r.labels, r.labelBuf[:]); err != nil {
		return formatError(r.lblName, eofError(err), "label %d", r.i)
	}
	label := int(r.labelBuf[0])
	if r.classes != nil && label >= len(r.classes) {
		return formatError(r.lblName, nil, "label %d of record %d is not below the %d classes", label, r.i, len(r.classes))
	}
	rec.Label = label
	rec.Client = ""
	r.i++
	return nil
}

func (r *idxReader) Classes() []string { return classesCopy(r.classes) }

// Len returns the number of records given by the IDX header.
func (r *idxReader) Len() int { return r.n }

func (r *idxReader) Close() error {
	err := closeAll(r.closers)
	r.closers = nil
	return err
}

// openMNISTAll opens the train files of dir followed by the test files, so
// that rows 0…59,999 are MNIST's training images and 60,000…69,999 its test
// images, as the paper pools them before partitioning.
func openMNISTAll(dir string, classes []string) (Reader, error) {
	train, err := openMNIST(dir+":train", classes)
	if err != nil {
		return nil, err
	}
	test, err := openMNIST(dir+":test", classes)
	if err != nil {
		train.Close()
		return nil, err
	}
	return &concat{parts: []Reader{train, test}}, nil
}
