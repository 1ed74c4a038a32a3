package data

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Record is one example as read from a dataset, before model preprocessing.
//
// Exactly one of Image, Float and Text holds the example's input; the
// other two are nil or "". A Reader reuses the slices of the Record passed
// to Next, so a caller that keeps a Record's data past the next call must
// copy it.
type Record struct {
	// Image holds raw pixels 0..255 in HWC order (H*W*C bytes, channels
	// interleaved) for image datasets; nil otherwise.
	Image []uint8

	// Float holds numeric features for datasets that store numbers other
	// than images: LEAF FEMNIST (784 values in [0,1], 1 is background)
	// and .npy/.npz rows that are not uint8 images. Nil otherwise.
	Float []float32

	// Text is the input text of text datasets: a window of WindowLen
	// characters for Shakespeare. "" otherwise.
	Text string

	// Shape is the shape of Image ([H, W, C]) or Float (e.g. [28, 28] for
	// FEMNIST, the row shape of a .npy tensor). Empty for Text.
	Shape []int

	// Label is the class index, in [0, len(Classes())) when the class
	// names are known.
	Label int

	// Client is the natural client id of the example: the LEAF user, or
	// the speaker role of a text corpus. "" when the format has none.
	Client string
}

// Reader streams the records of a dataset.
type Reader interface {
	// Next fills r with the next record, reusing r's slices when it can,
	// and returns io.EOF after the last record. An error other than
	// io.EOF names the file and what is wrong with it.
	Next(r *Record) error

	// Classes returns the class names in label order, or nil when the
	// format does not record them.
	Classes() []string

	// Close releases the files the Reader holds.
	Close() error
}

// Sized is implemented by Readers that know their number of records before
// reading them (IDX, CIFAR, .npy and .npz readers). Len returns that
// number, or -1 when it is not known before reading (CIFAR batches that
// are compressed or inside an archive).
type Sized interface {
	Len() int
}

// ErrFormat is wrapped by every error that reports malformed dataset
// content (as opposed to a file that cannot be opened or read).
var ErrFormat = errors.New("malformed dataset")

// SpecHelp describes the dataset spec grammar accepted by Open. It is
// written for a command's --help text.
const SpecHelp = `Dataset specs (FORMAT:PATH[:OPTION]; gzip files are detected by content):
  mnist:DIR[:train|test|all]    IDX files {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] in DIR;
                                all = train then test (70,000 MNIST rows)
  fashion:DIR[:train|test|all]  the same files, with Fashion-MNIST class names
  idx:IMAGES[,LABELS]           one IDX image/label pair; LABELS defaults to IMAGES with
                                "images-idx3" replaced by "labels-idx1"
  cifar10:PATH[:train|test]     CIFAR-10 binary batches: a .bin file, a directory or the .tar.gz
  cifar100:PATH[:train|test]    CIFAR-100 binary (train.bin, test.bin); the fine label is used
  imagefolder:PATH[:SUBDIR]     PATH/SUBDIR/<class>/**.png|jpg, PATH a directory or a .tar.gz;
                                classes are the sorted subdirectory names; pixels as RGB
  leaf:PATH[:train|test]        LEAF JSON (FEMNIST, Shakespeare): a .json file, or the *.json
                                under a directory or .tar.gz (only those under a "train" or
                                "test" directory when a split is given); client = LEAF user
  speakers:FILE.txt             plain text split into roles by speaker headings ("First
                                Citizen:" after a blank line); 80-character windows, label =
                                next character in LEAF's Shakespeare vocabulary; client = role
  roles:PATH                    LEAF raw Shakespeare, one <ROLE>.txt per client, in a directory
                                or .tar.gz; windows and labels as for speakers
  npz:FILE.npz[:XKEY,YKEY]      NumPy archive; keys default to x,y then images,labels then
                                x_train,y_train; OPTION train|test selects x_train,y_train or
                                x_test,y_test
  npy:X.npy,Y.npy               NumPy arrays: X [N, ...] and integer labels Y [N]
  A bare path works for .npz, .json (leaf), .txt (speakers), *idx3-ubyte[.gz] (idx),
  data_batch_N.bin or test_batch.bin (cifar10), and directories holding MNIST IDX files
  or CIFAR-10 batches.`

// Open opens the dataset described by spec and returns a streaming Reader.
// The grammar is given by SpecHelp and the package documentation.
func Open(spec string) (Reader, error) {
	if spec == "" {
		return nil, errors.New("data: empty dataset spec; see the spec grammar in --help")
	}
	if format, rest, ok := strings.Cut(spec, ":"); ok {
		if open := opener(format); open != nil {
			if rest == "" {
				return nil, fmt.Errorf("data: spec %q has no path after %q", spec, format+":")
			}
			return open(rest)
		}
		if _, err := os.Stat(spec); err != nil && isFormatName(format) {
			return nil, fmt.Errorf("data: unknown dataset format %q in %q: want one of %s (see --help)", format, spec, strings.Join(Formats(), ", "))
		}
	}
	return openDetected(spec)
}

// isFormatName reports whether s looks like a format name rather than the
// start of a path: a short lowercase word (a Windows drive letter such as
// "C" is not one).
func isFormatName(s string) bool {
	if len(s) < 2 || len(s) > 16 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// format is one dataset format of Open: its name and how to open the
// rest of a spec.
type format struct {
	name string
	open func(rest string) (Reader, error)
}

// formatTable lists the formats of Open, in the order of SpecHelp.
func formatTable() []format {
	return []format{
		{"mnist", func(rest string) (Reader, error) { return openMNIST(rest, nil) }},
		{"fashion", func(rest string) (Reader, error) { return openMNIST(rest, fashionClasses) }},
		{"idx", openIDXSpec},
		{"cifar10", func(rest string) (Reader, error) { return openCIFARSpec(rest, cifar10) }},
		{"cifar100", func(rest string) (Reader, error) { return openCIFARSpec(rest, cifar100) }},
		{"imagefolder", openImageFolderSpec},
		{"leaf", openLEAFSpec},
		{"speakers", openSpeakersSpec},
		{"roles", openRolesSpec},
		{"npz", openNPZSpec},
		{"npy", openNPYSpec},
	}
}

// Formats returns the format names Open accepts before the first colon of
// a spec, in the order of SpecHelp.
func Formats() []string {
	var names []string
	for _, f := range formatTable() {
		names = append(names, f.name)
	}
	return names
}

// opener returns the function that opens the rest of a spec of the named
// format, or nil when name is not a known format name.
func opener(name string) func(rest string) (Reader, error) {
	for _, f := range formatTable() {
		if f.name == name {
			return f.open
		}
	}
	return nil
}

// splitOption splits "PATH:OPTION" at its last colon, unless the whole of
// rest names an existing file, so that paths holding a colon still work
// when no option is given.
func splitOption(rest string) (path, option string) {
	if _, err := os.Stat(rest); err == nil {
		return rest, ""
	}
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		return rest[:i], rest[i+1:]
	}
	return rest, ""
}

// splitPair splits "A,B" at its last comma, unless the whole of s names an
// existing file.
func splitPair(s string) (a, b string) {
	if _, err := os.Stat(s); err == nil {
		return s, ""
	}
	if i := strings.LastIndexByte(s, ','); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// split parses a train|test option, "" meaning train.
func split(spec, option string) (string, error) {
	switch option {
	case "", "train":
		return "train", nil
	case "test":
		return "test", nil
	}
	return "", fmt.Errorf("data: %s: unknown split %q (want train or test)", spec, option)
}

// openDetected opens a spec without a format prefix by looking at the path.
func openDetected(spec string) (Reader, error) {
	path, option := spec, ""
	fi, err := os.Stat(path)
	if err != nil {
		if i := strings.LastIndexByte(spec, ':'); i >= 0 {
			if fi2, err2 := os.Stat(spec[:i]); err2 == nil {
				path, option, fi, err = spec[:i], spec[i+1:], fi2, nil
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	withOption := func(open func(string) (Reader, error)) (Reader, error) {
		if option != "" {
			return open(path + ":" + option)
		}
		return open(path)
	}
	noOption := func(format string, open func(string) (Reader, error)) (Reader, error) {
		if option != "" {
			return nil, fmt.Errorf("data: %s: format %s takes no option (got %q)", path, format, option)
		}
		return open(path)
	}
	if fi.IsDir() {
		switch {
		case findMNIST(path, "train") != "" || findMNIST(path, "t10k") != "":
			return withOption(func(s string) (Reader, error) { return openMNIST(s, nil) })
		case cifarDir(path, cifar10) != "":
			return withOption(func(s string) (Reader, error) { return openCIFARSpec(s, cifar10) })
		}
		return nil, fmt.Errorf("data: %s: cannot tell the dataset format of this directory; prefix the spec with a format such as imagefolder: or leaf: (see --help)", path)
	}
	base := strings.ToLower(filepath.Base(path))
	switch {
	case strings.HasSuffix(base, ".npz"):
		return withOption(openNPZSpec)
	case strings.HasSuffix(base, ".json"):
		return withOption(openLEAFSpec)
	case strings.HasSuffix(base, ".txt"):
		return noOption("speakers", openSpeakersSpec)
	case strings.Contains(base, "idx3-ubyte"):
		return noOption("idx", openIDXSpec)
	case isCIFAR10BatchName(base):
		return noOption("cifar10", func(s string) (Reader, error) { return openCIFARSpec(s, cifar10) })
	}
	return nil, fmt.Errorf("data: %s: cannot tell the dataset format from the file name; prefix the spec with a format (see --help)", path)
}

// setImage sizes r for an image record of shape h×w×c and clears the
// fields that image records do not use. It returns r.Image.
func (r *Record) setImage(h, w, c int) []uint8 {
	n := h * w * c
	if cap(r.Image) < n {
		r.Image = make([]uint8, n)
	}
	r.Image = r.Image[:n]
	r.Float = nil
	r.Text = ""
	r.Shape = append(r.Shape[:0], h, w, c)
	return r.Image
}

// recordSize returns the number of bytes of a record of elemSize-byte
// elements with the given dimensions, and whether all dimensions are
// positive and the size is at most maxRecordBytes.
func recordSize(elemSize int, dims ...int) (int, bool) {
	n := elemSize
	for _, d := range dims {
		if d <= 0 || d > maxRecordBytes/n {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// readImage reads an h×w×c image from src into r. Unlike setImage followed
// by io.ReadFull, it grows r.Image as bytes arrive, so that a corrupt
// header claiming a huge image cannot allocate more than the data holds.
func (r *Record) readImage(src io.Reader, h, w, c int) error {
	var err error
	r.Image, err = readN(src, r.Image, h*w*c)
	r.Float = nil
	r.Text = ""
	r.Shape = append(r.Shape[:0], h, w, c)
	return err
}

// readN reads exactly n bytes from src into dst's storage, growing it in
// chunks of at most 1 MiB beyond its capacity, and returns dst[:n]. A
// stream that ends early gives io.ErrUnexpectedEOF.
func readN(src io.Reader, dst []byte, n int) ([]byte, error) {
	if cap(dst) >= n {
		dst = dst[:n]
		_, err := io.ReadFull(src, dst)
		return dst, eofError(err)
	}
	const chunk = 1 << 20
	dst = dst[:0]
	for len(dst) < n {
		m := min(n-len(dst), max(chunk, cap(dst)-len(dst)))
		dst = slices.Grow(dst, m)
		k, err := io.ReadFull(src, dst[len(dst):len(dst)+m])
		dst = dst[:len(dst)+k]
		if err != nil {
			return dst, eofError(err)
		}
	}
	return dst, nil
}

// setFloat sizes r for a float record of n values and clears the fields
// that float records do not use. The caller sets r.Shape. It returns
// r.Float.
func (r *Record) setFloat(n int) []float32 {
	if cap(r.Float) < n {
		r.Float = make([]float32, n)
	}
	r.Float = r.Float[:n]
	r.Image = nil
	r.Text = ""
	return r.Float
}

// setText sets r to a text record and clears the fields that text records
// do not use.
func (r *Record) setText(s string) {
	r.Text = s
	r.Image = nil
	r.Float = nil
	r.Shape = r.Shape[:0]
}

// formatError returns an error naming file that wraps ErrFormat, and err
// when it is not nil.
func formatError(file string, err error, format string, args ...any) error {
	return &fileError{file: file, msg: fmt.Sprintf(format, args...), err: err}
}

// fileError reports malformed content in a named file.
type fileError struct {
	file, msg string
	err       error
}

func (e *fileError) Error() string {
	s := "data: " + e.file + ": " + e.msg
	if e.err != nil {
		s += ": " + e.err.Error()
	}
	return s
}

func (e *fileError) Unwrap() []error {
	if e.err != nil {
		return []error{ErrFormat, e.err}
	}
	return []error{ErrFormat}
}

// eofError turns an early io.EOF into io.ErrUnexpectedEOF for a read that
// started a record.
func eofError(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// digitClasses are the class names of MNIST.
var digitClasses = []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// classesCopy returns a copy of names so that callers cannot change the
// package's tables.
func classesCopy(names []string) []string {
	if names == nil {
		return nil
	}
	return append([]string(nil), names...)
}

// Concat returns a Reader of the records of parts, one after the other,
// with the class names of the first. Closing it closes every part. It
// panics without parts.
func Concat(parts ...Reader) Reader {
	if len(parts) == 0 {
		panic("data: Concat of nothing")
	}
	return &concat{parts: parts}
}

// concat reads its parts one after the other.
type concat struct {
	parts []Reader
	i     int
}

func (c *concat) Next(r *Record) error {
	for c.i < len(c.parts) {
		err := c.parts[c.i].Next(r)
		if err != io.EOF {
			return err
		}
		c.i++
	}
	return io.EOF
}

// Classes returns the first part's class names.
func (c *concat) Classes() []string { return c.parts[0].Classes() }

// Len returns the total number of records when every part knows its own,
// else -1.
func (c *concat) Len() int {
	n := 0
	for _, p := range c.parts {
		s, ok := p.(Sized)
		if !ok || s.Len() < 0 {
			return -1
		}
		n += s.Len()
	}
	return n
}

func (c *concat) Close() error {
	closers := make([]io.Closer, len(c.parts))
	for i, p := range c.parts {
		closers[i] = p
	}
	return closeAll(closers)
}

// closeAll closes every c, returning the first error.
func closeAll(cs []io.Closer) error {
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
