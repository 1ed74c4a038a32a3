package data

import (
	"encoding/binary"
	"io"
	"os"

	"github.com/fedcalib/fedcalib/infer/data/internal/deflate"
)

// maxWholeGzip bounds a gzip file that openStream inflates whole with
// libdeflate, compressed and decompressed: 256 MiB (MNIST's training
// images take 47 MB). Larger data is decompressed as it is read. The
// output is sized by this bound, never by the gzip trailer's ISIZE, which
// the file's author chooses; its pages cost memory only once written, so
// a file that would inflate beyond the bound costs at most this much
// before it is read the streaming way instead.
const maxWholeGzip = 256 << 20

// maxDeflateRatio is deflate's largest expansion: a 258-byte match coded
// in two bits, 1032 bytes out per byte in.
const maxDeflateRatio = 1032

// hugeBytes is the size of a huge page on x86-64 and arm64 with 4 KiB
// pages: memory of at least this size is mapped with huge pages.
const hugeBytes = 2 << 20

// releaseStep is how many bytes a wholeGzip reader consumes between
// returns of their pages to the system.
const releaseStep = 4 << 20

// wholeGzip reads the decompressed content of a gzip file from memory
// that is not Go's heap (mapped by mapBytes), giving back the pages it
// has read as it goes and all of them at the end, so that reading a file
// whole costs its decompressed size at the start and less and less after.
type wholeGzip struct {
	mem      []byte // the mapping; nil once released
	buf      []byte // the decompressed content, a prefix of mem
	off      int    // bytes read
	released int    // bytes of buf given back, a multiple of the page size
}

// inflateWhole decompresses the gzip file f with libdeflate and returns a
// reader of its content. It reads f with ReadAt, leaving its offset where
// it was, and returns nil when f is not a regular file of at most maxWholeGzip bytes, the
// library or the memory is not there, or the data is not clean gzip of at
// most maxWholeGzip bytes, or says in its trailer that it is not (the
// caller then reads f the streaming way, which reports what is wrong with
// it).
func inflateWhole(f *os.File) *wholeGzip {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() < 4 || fi.Size() > maxWholeGzip {
		return nil
	}
	d, err := deflate.NewDecompressor()
	if err != nil {
		return nil // no libdeflate: only slower
	}
	defer d.Close()
	size := int(fi.Size())
	// The last member's ISIZE, its size modulo 4 GiB, may be a lie: it
	// only turns away data that says it will not fit, before it is read.
	var isize [4]byte
	if _, err := f.ReadAt(isize[:], int64(size-4)); err != nil || binary.LittleEndian.Uint32(isize[:]) > maxWholeGzip {
		return nil
	}
	in := mapBytes(size, size >= hugeBytes)
	if in == nil {
		return nil
	}
	defer unmapBytes(in)
	if _, err := f.ReadAt(in, 0); err != nil {
		return nil
	}
	// Gzip data of hugeBytes/8 bytes inflates to hugeBytes or more
	// unless it is incompressible; MNIST's images (1.6 MB for the test
	// set) inflate about 5-fold, its labels (4.5 kB) about 2-fold.
	out := mapBytes(int(min(int64(maxWholeGzip), int64(size)*maxDeflateRatio)), size >= hugeBytes/8)
	if out == nil {
		return nil
	}
	n, err := d.Gunzip(out, in)
	if err != nil {
		unmapBytes(out)
		return nil
	}
	return &wholeGzip{mem: out, buf: out[:n]}
}

// Read copies the next bytes of the content into p.
func (w *wholeGzip) Read(p []byte) (int, error) {
	if w.off == len(w.buf) {
		w.release()
		return 0, io.EOF
	}
	n := copy(p, w.buf[w.off:])
	w.off += n
	if w.off == len(w.buf) {
		w.release()
	} else if w.off-w.released >= releaseStep {
		end := w.off &^ (os.Getpagesize() - 1)
		dropBytes(w.buf[w.released:end])
		w.released = end
	}
	return n, nil
}

// release gives the whole mapping back; Read then returns io.EOF.
func (w *wholeGzip) release() {
	if w.mem != nil {
		unmapBytes(w.mem)
	}
	w.mem, w.buf, w.off, w.released = nil, nil, 0, 0
}
