package logits

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

// Archive is an open logits file whose directory and logits header have
// been read and checked, but none of whose data has. It reads the arrays
// whole (ReadColumns, ReadLogits) or the rows in order, a block at a time
// (Blocks), so that a caller holds no more than it needs: a federated run
// builds its partition from the columns before it reads the logits, and
// eval measures a file of any size in a few blocks of memory. Read is
// Open, ReadColumns and ReadLogits. An Archive is not safe for concurrent
// use; Close releases its file.
type Archive struct {
	closer  io.Closer // the file; nil when the caller owns the reader
	size    int64
	member  map[string]*zip.File
	rows    int
	classes int
	fortran bool   // the logits are in column-major order
	path    string // for errors; empty when not opened from a file
	budget  int64  // the memory budget; see SetMemoryBudget
}

// DefaultMemoryBudget is the memory budget of an Archive unless
// SetMemoryBudget sets another: 4 GiB, far above the logits of the
// datasets fedcalib is used on (10^7 rows of 10 classes take 400 MB) and
// far below what a hostile archive can declare.
const DefaultMemoryBudget int64 = 4 << 30

// ErrOverBudget is returned (wrapped) when reading an archive would take
// more memory than its budget allows.
var ErrOverBudget = errors.New("above the memory budget")

// SetMemoryBudget sets the most memory, in bytes, that the archive's
// arrays may take once read: the arrays as the archive's directory and
// headers declare them (the columns and the float32 logits) are checked
// against it before anything is allocated, so a file that declares more
// rows or classes than the budget allows (a zip bomb among them) is
// refused with an error wrapping ErrOverBudget at no cost. Blocks, which
// holds a few rows at a time, checks the whole file too: what a file
// declares is all a reader can check before reading it, and a deflated
// entry can declare 1000 times its size. n ≤ 0 restores
// DefaultMemoryBudget.
func (a *Archive) SetMemoryBudget(n int64) {
	if n <= 0 {
		n = DefaultMemoryBudget
	}
	a.budget = n
}

// CheckBudget reports, with an error wrapping ErrOverBudget, when the
// whole file — its columns and its logits — would not fit the memory
// budget, before any of it is read.
func (a *Archive) CheckBudget() error {
	return a.wrap(a.fits("logits", a.logitsBytes()+a.columnBytes()))
}

// fits checks that holding bytes bytes for what stays within the budget.
func (a *Archive) fits(what string, bytes int64) error {
	budget := a.budget
	if budget <= 0 {
		budget = DefaultMemoryBudget
	}
	if bytes > budget || bytes < 0 {
		return fmt.Errorf("%s: %d rows of %d classes take %s, %w of %s (fedcalib --memory-budget raises it)", what, a.rows, a.classes, formatBytes(bytes), ErrOverBudget, formatBytes(budget))
	}
	return nil
}

// columnBytes returns the memory the columns take: labels, client and
// split columns, and the class names counted at their stored size.
func (a *Archive) columnBytes() int64 {
	n := int64(a.rows) * 4
	if a.member["client"] != nil {
		n += int64(a.rows) * 4
	}
	if a.member["split"] != nil {
		n += int64(a.rows)
	}
	if zf := a.member["classes"]; zf != nil {
		n += int64(min(zf.UncompressedSize64, 1<<62))
	}
	return n
}

// logitsBytes returns the memory the float32 logits take.
func (a *Archive) logitsBytes() int64 {
	if a.classes > 0 && a.rows > (1<<62)/4/a.classes {
		return -1 // overflows: over any budget
	}
	return int64(a.rows) * int64(a.classes) * 4
}

// formatBytes formats n bytes for people: "4 GiB", "38.1 MiB", "512 B".
func formatBytes(n int64) string {
	if n < 0 {
		return "more than 4 EiB"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 || v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[u])
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}

// Open opens the logits file at path and checks its directory and the
// shape and type of its logits. A path that is not a regular file is
// refused. The Archive reads within DefaultMemoryBudget until
// SetMemoryBudget sets another.
func Open(path string) (*Archive, error) {
	// A device or a FIFO is refused before it is opened (opening a FIFO
	// waits for a writer): an archive is read at offsets, by its size.
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if err := fileio.CheckRegular(path, st); err != nil {
		return nil, err
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, err
	}
	a, err := openArchive(fh, st.Size())
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	a.closer, a.path = fh, path
	return a, nil
}

// openArchive is Open of the archive held by r, of size bytes.
func openArchive(r io.ReaderAt, size int64) (*Archive, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("not a NumPy .npz archive: %w", err)
	}
	zr.RegisterDecompressor(zip.Deflate, newFlateReader)
	// NumPy names the members KEY.npy; other writers may use KEY alone.
	a := &Archive{size: size, member: map[string]*zip.File{}}
	for _, zf := range zr.File {
		k := strings.TrimSuffix(zf.Name, ".npy")
		if a.member[k] == nil || strings.HasSuffix(zf.Name, ".npy") {
			a.member[k] = zf
		}
	}
	for _, k := range []string{"logits", "labels"} {
		if a.member[k] == nil {
			return nil, fmt.Errorf("no %q array: a logits file needs \"logits\" [N, C] and \"labels\" [N]", k)
		}
	}
	l, err := a.openLogits()
	if err != nil {
		return nil, err
	}
	l.rc.Close()
	return a, nil
}

// openLogits opens the logits array, checks its shape and type, and
// records them.
func (a *Archive) openLogits() (*array, error) {
	l, err := openArray(a.member["logits"], "logits", a.size)
	if err != nil {
		return nil, err
	}
	if len(l.Shape) != 2 {
		l.rc.Close()
		return nil, fmt.Errorf("logits: shape %v, want [N, C]", l.Shape)
	}
	if l.kind != 'f' {
		l.rc.Close()
		return nil, fmt.Errorf("logits: dtype %s, want float32 (<f4) or float64 (<f8)", l.Descr)
	}
	a.rows, a.classes = l.Shape[0], l.Shape[1]
	a.fortran = l.Fortran && a.rows > 1 && a.classes > 1
	return l, nil
}

// wrap prefixes err with the archive's path, when it has one.
func (a *Archive) wrap(err error) error {
	if err == nil || a.path == "" {
		return err
	}
	return fmt.Errorf("%s: %w", a.path, err)
}

// Close closes the file of an archive opened by Open.
func (a *Archive) Close() error {
	if a.closer == nil {
		return nil
	}
	return a.closer.Close()
}

// Len returns the number of rows N.
func (a *Archive) Len() int { return a.rows }

// NumClasses returns the number of classes C.
func (a *Archive) NumClasses() int { return a.classes }

// Has reports whether the archive holds the array key ("client",
// "split", "classes", …).
func (a *Archive) Has(key string) bool { return a.member[key] != nil }

// ClassNames reads the class names (the "classes" array), checked as
// Validate checks them; nil when the file names none.
func (a *Archive) ClassNames() ([]string, error) {
	names, err := a.classNames()
	if err == nil {
		if err = calib.CheckClassNames(names, a.classes); err != nil {
			err = fmt.Errorf("classes: %w", err)
		}
	}
	return names, a.wrap(err)
}

func (a *Archive) classNames() ([]string, error) {
	zf := a.member["classes"]
	if zf == nil {
		return nil, nil
	}
	return readNames(zf, a.classes, a.size)
}

// Input reads what the file records its "logits" array to hold (the
// "input" array, see File.Input); "" when it does not say.
func (a *Archive) Input() (string, error) {
	in, err := a.input()
	if err == nil {
		err = (&File{Classes: 2, Input: in}).validateInput()
	}
	return in, a.wrap(err)
}

func (a *Archive) input() (string, error) {
	zf := a.member["input"]
	if zf == nil {
		return "", nil
	}
	arr, err := openArray(zf, "input", a.size)
	if err != nil {
		return "", err
	}
	defer arr.rc.Close()
	if len(arr.Shape) != 1 || arr.Shape[0] != 1 {
		return "", fmt.Errorf("input: shape %v, want [1] (one string)", arr.Shape)
	}
	v, err := arr.readStrings()
	if err != nil {
		return "", err
	}
	return v[0], nil
}

// ReadColumns reads every array but the logits: the labels, the client
// and split columns and the class names, checked as Validate checks
// them. The File it returns has Classes set and Logits nil;
// ReadLogits completes it.
func (a *Archive) ReadColumns() (*File, error) {
	f, err := a.readColumns()
	return f, a.wrap(err)
}

func (a *Archive) readColumns() (*File, error) {
	if err := a.fits("columns", a.columnBytes()); err != nil {
		return nil, err
	}
	f := &File{Classes: a.classes}
	var err error
	if f.Labels, err = readColumn[int32](a, "labels"); err != nil {
		return nil, err
	}
	if a.Has("client") {
		if f.Client, err = readColumn[int32](a, "client"); err != nil {
			return nil, err
		}
	}
	if a.Has("split") {
		if f.Split, err = readColumn[uint8](a, "split"); err != nil {
			return nil, err
		}
	}
	if f.ClassNames, err = a.classNames(); err != nil {
		return nil, err
	}
	if f.Input, err = a.input(); err != nil {
		return nil, err
	}
	if err := f.validateColumns(); err != nil {
		return nil, err
	}
	return f, nil
}

// ReadLogits reads the logits into f, which ReadColumns returned, and
// validates f.
func (a *Archive) ReadLogits(f *File) error { return a.wrap(a.readLogits(f)) }

func (a *Archive) readLogits(f *File) error {
	if f.Classes != a.classes || len(f.Labels) != a.rows {
		return fmt.Errorf("logits: the archive has %d rows of %d classes, the file %d of %d: not its columns", a.rows, a.classes, len(f.Labels), f.Classes)
	}
	if err := a.fits("logits", a.logitsBytes()+a.columnBytes()); err != nil {
		return err
	}
	if a.fortran {
		// The transposition holds two copies.
		if err := a.fits("logits (column-major, transposed)", 2*a.logitsBytes()+a.columnBytes()); err != nil {
			return err
		}
	}
	l, err := a.openLogits()
	if err != nil {
		return err
	}
	defer l.rc.Close()
	if f.Logits, err = l.readFloat32(); err != nil {
		return err
	}
	if a.fortran {
		f.Logits = transpose(f.Logits, a.rows, a.classes)
	}
	return f.Validate()
}

// Block is a run of consecutive rows of a logits file, as Blocks reads
// them. The zero value is an empty block.
type Block struct {
	// First is the index of the first row in the file.
	First int
	// Logits holds Len() rows of the file's C values, row-major.
	Logits []float32
	// Labels holds the class of each row.
	Labels []int32
	// Split holds each row's split; nil when the file has no split
	// column.
	Split []uint8
}

// Len returns the number of rows of the block.
func (b *Block) Len() int { return len(b.Labels) }

// Blocks reads the rows of an archive in order, a block at a time: the
// logits, labels and split column (not the client column), checked as
// Validate checks them. Create one with Archive.Blocks; it is not safe
// for concurrent use. Its memory is one read buffer (at most 1 MiB) and
// a decompressor per deflated array besides the caller's blocks, except for logits stored in
// column-major (Fortran) order, which it reads whole and transposes
// first.
type Blocks struct {
	a                     *Archive
	logits, labels, split *array
	held                  []float32 // the whole logits, when Fortran-ordered
	next                  int
	buf                   []byte
	err                   error // the first error of Next, which it returns from then on
}

// Blocks returns a reader of the archive's rows. Close it when done.
func (a *Archive) Blocks() (*Blocks, error) {
	b, err := a.blocks()
	return b, a.wrap(err)
}

func (a *Archive) blocks() (*Blocks, error) {
	// Read in blocks or not, a file is held to the budget by what it
	// declares: all a reader can check before it reads.
	if err := a.fits("logits", a.logitsBytes()+a.columnBytes()); err != nil {
		return nil, err
	}
	b := &Blocks{a: a}
	l, err := a.openLogits()
	if err != nil {
		return nil, err
	}
	if a.fortran {
		if err := a.fits("logits (column-major, read whole)", 2*a.logitsBytes()); err != nil {
			l.rc.Close()
			return nil, err
		}
		b.held, err = l.readFloat32()
		l.rc.Close()
		if err != nil {
			return nil, err
		}
		b.held = transpose(b.held, a.rows, a.classes)
	} else {
		b.logits = l
	}
	if b.labels, err = a.openColumn("labels"); err != nil {
		b.Close()
		return nil, err
	}
	if a.member["split"] != nil {
		if b.split, err = a.openColumn("split"); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// openColumn opens the 1-D integer array key and checks its shape.
func (a *Archive) openColumn(key string) (*array, error) {
	c, err := openArray(a.member[key], key, a.size)
	if err != nil {
		return nil, err
	}
	if err := c.checkColumn(a.rows); err != nil {
		c.rc.Close()
		return nil, err
	}
	return c, nil
}

// Next reads the next rows, at most rows of them (rows > 0), into dst,
// reusing its slices' memory, and checks them as Validate does. It
// returns io.EOF, with dst empty, when no row is left, once it has
// checked that every array ends where it should (which also verifies
// each entry's CRC-32). After an error, Next returns that error.
func (b *Blocks) Next(dst *Block, rows int) error {
	if rows <= 0 {
		panic("logits: Blocks.Next of no rows")
	}
	if b.err != nil {
		return b.err
	}
	if err := b.next1(dst, rows); err != io.EOF {
		b.err = b.a.wrap(err)
		return b.err
	}
	return io.EOF
}

func (b *Blocks) next1(dst *Block, rows int) error {
	c := b.a.classes
	n := min(rows, b.a.rows-b.next)
	if err := b.a.fits("a block of logits", int64(n)*int64(c)*4); err != nil {
		return err
	}
	dst.First = b.next
	dst.Logits = resize(dst.Logits, n*c)
	dst.Labels = resize(dst.Labels, n)
	if b.split != nil {
		dst.Split = resize(dst.Split, n)
	} else {
		dst.Split = nil
	}
	if n == 0 {
		for _, arr := range []*array{b.logits, b.labels, b.split} {
			if arr != nil {
				if err := arr.end(); err != nil {
					return err
				}
			}
		}
		return io.EOF
	}
	if b.held != nil {
		copy(dst.Logits, b.held[b.next*c:])
	} else if err := b.read(b.logits, len(dst.Logits), func(p []byte, at int) {
		decodeFloat32(dst.Logits[at:], p, b.logits.dtype.size)
	}); err != nil {
		return err
	}
	if err := readInts(b, b.labels, dst.Labels); err != nil {
		return err
	}
	if b.split != nil {
		if err := readInts(b, b.split, dst.Split); err != nil {
			return err
		}
	}
	blk := File{Logits: dst.Logits, Labels: dst.Labels, Split: dst.Split, Classes: c}
	if err := blk.checkValues(b.next); err != nil {
		return err
	}
	b.next += n
	return nil
}

// read reads the next count elements of arr through b's buffer and calls
// fn with each piece and the index, among the count, of its first
// element.
func (b *Blocks) read(arr *array, count int, fn func(p []byte, at int)) error {
	size := arr.dtype.size
	for at := 0; at < count; {
		m := min(count-at, blockSize/size)
		if cap(b.buf) < m*size {
			b.buf = make([]byte, m*size)
		}
		p := b.buf[:m*size]
		if err := arr.take(p); err != nil {
			return err
		}
		fn(p, at)
		at += m
	}
	return nil
}

// readInts reads the next len(dst) elements of the integer column arr
// into dst, checking that each fits T.
func readInts[T integer](b *Blocks, arr *array, dst []T) error {
	var bad error
	err := b.read(arr, len(dst), func(p []byte, at int) {
		if bad != nil {
			return
		}
		if i, v, ok := decodeIntegers(dst[at:at+len(p)/arr.dtype.size], p, arr.dtype); !ok {
			bad = fmt.Errorf("%s: row %d is %s, out of range", arr.name, b.next+at+i, v)
		}
	})
	if err != nil {
		return err
	}
	return bad
}

// Close releases the arrays' decompressors. It does not close the
// archive.
func (b *Blocks) Close() error {
	var errs []error
	for _, arr := range []*array{b.logits, b.labels, b.split} {
		if arr != nil {
			errs = append(errs, arr.rc.Close())
		}
	}
	return errors.Join(errs...)
}

// resize returns s with length n, reusing its memory when it is large
// enough.
func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}
