package data

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// readAll reads every record of r, copying each one, and closes r.
func readAll(t testing.TB, r Reader) []Record {
	t.Helper()
	defer func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	var (
		out []Record
		rec Record
	)
	for {
		err := r.Next(&rec)
		if err == io.EOF {
			// Next keeps returning io.EOF.
			if err := r.Next(&rec); err != io.EOF {
				t.Fatalf("Next after io.EOF = %v, want io.EOF", err)
			}
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, Record{
			Image:  slices.Clone(rec.Image),
			Float:  slices.Clone(rec.Float),
			Text:   rec.Text,
			Shape:  slices.Clone(rec.Shape),
			Label:  rec.Label,
			Client: rec.Client,
		})
	}
}

// openAll opens spec and reads all its records.
func openAll(t testing.TB, spec string) ([]Record, []string) {
	t.Helper()
	r, err := Open(spec)
	if err != nil {
		t.Fatalf("Open(%q): %v", spec, err)
	}
	classes := r.Classes()
	return readAll(t, r), classes
}

// drain reads r until an error and returns the records read and that
// error (nil when the reader ended with io.EOF).
func drain(r Reader, limit int) (int, error) {
	var rec Record
	for n := 0; n < limit; n++ {
		err := r.Next(&rec)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return limit, nil
}

// idxFile returns an unsigned-byte IDX file with the given dimensions and
// content.
func idxFile(dims []int, content []byte) []byte {
	b := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
	}
	return append(b, content...)
}

// gz compresses b.
func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// writeFile writes data to dir/name and returns the path.
func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// tarGz returns a gzip-compressed tar archive of the named files, in the
// given order.
func tarGz(t testing.TB, names []string, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(files[n])
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// npyBytes returns a version 1.0 .npy file, built by hand following the
// format's specification: magic, version, little-endian header length,
// a header dictionary padded with spaces and a newline so that the data
// starts at a multiple of 64 bytes, then the data.
func npyBytes(descr string, fortran bool, shape []int, data []byte) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	sh := "(" + strings.Join(dims, ", ")
	if len(shape) == 1 {
		sh += ","
	}
	sh += ")"
	order := "False"
	if fortran {
		order = "True"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, order, sh)
	total := 10 + len(dict) + 1
	pad := (64 - total%64) % 64
	dict += strings.Repeat(" ", pad) + "\n"
	b := []byte("\x93NUMPY\x01\x00")
	b = binary.LittleEndian.AppendUint16(b, uint16(len(dict)))
	b = append(b, dict...)
	return append(b, data...)
}

// le32 returns the little-endian float32 encoding of v.
func le32(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// le64 returns the little-endian int64 encoding of v.
func le64(v ...int64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

// zipFile returns a zip archive (an .npz) of the named members.
func zipFile(t testing.TB, names []string, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range names {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(files[n])
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// byteFiles yields in-memory files; tests and fuzz targets use it.
type byteFiles struct {
	names []string
	data  [][]byte
}

func (b *byteFiles) next() (string, io.Reader, error) {
	if len(b.names) == 0 {
		return "", nil, io.EOF
	}
	name, d := b.names[0], b.data[0]
	b.names, b.data = b.names[1:], b.data[1:]
	return name, bytes.NewReader(d), nil
}

func (b *byteFiles) Close() error { return nil }
