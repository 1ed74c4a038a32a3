package logits

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/internal/npy"
)

func TestParseDtype(t *testing.T) {
	for _, tc := range []struct {
		descr string
		want  dtype
		ok    bool
	}{
		{"<f4", dtype{'f', 4, false}, true},
		{">f8", dtype{'f', 8, true}, true},
		{"|u1", dtype{'u', 1, false}, true},
		{"|i1", dtype{'i', 1, false}, true},
		{">i2", dtype{'i', 2, true}, true},
		{"<u8", dtype{'u', 8, false}, true},
		{"<i1", dtype{}, false}, // NumPy writes |i1
		{"|i4", dtype{}, false},
		{"<f2", dtype{}, false},
		{"<c8", dtype{}, false},
		{"|b1", dtype{}, false},
		{"=f4", dtype{}, false},
		{"<f16", dtype{}, false},
		{"<U6", dtype{'U', 24, false}, true},
		{">U1", dtype{'U', 4, true}, true},
		{"|S4", dtype{'S', 4, false}, true},
		{"<U4096", dtype{'U', 4 * 4096, false}, true},
		{"<U4097", dtype{}, false}, // longer than calib.MaxClassNameBytes
		{"|U6", dtype{}, false},
		{"<S4", dtype{}, false}, // NumPy writes |S4
		{"<U0", dtype{}, false},
		{"<U06", dtype{}, false},
		{"<U+6", dtype{}, false},
		{"<U99999999999999999999", dtype{}, false},
		{"|O", dtype{}, false},
		{"", dtype{}, false},
	} {
		got, ok := parseDtype(tc.descr)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("parseDtype(%q) = %+v, %v; want %+v, %v", tc.descr, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSwapAndTranspose(t *testing.T) {
	b := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	for _, tc := range []struct {
		size int
		want []byte
	}{
		{1, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{2, []byte{2, 1, 4, 3, 6, 5, 8, 7}},
		{4, []byte{4, 3, 2, 1, 8, 7, 6, 5}},
		{8, []byte{8, 7, 6, 5, 4, 3, 2, 1}},
	} {
		got := bytes.Clone(b)
		npy.SwapBytes(got, tc.size)
		if !bytes.Equal(got, tc.want) {
			t.Errorf("swap(%d) = %v, want %v", tc.size, got, tc.want)
		}
	}
	// Column-major 2×3 [[1 2 3] [4 5 6]] is stored 1 4 2 5 3 6.
	if got := transpose([]float32{1, 4, 2, 5, 3, 6}, 2, 3); !reflect.DeepEqual(got, []float32{1, 2, 3, 4, 5, 6}) {
		t.Errorf("transpose = %v", got)
	}
}

func TestDecodeIntegers(t *testing.T) {
	le := func(size int, vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint64(b, v)[:len(b)+size]
		}
		return b
	}
	i8 := dtype{'i', 8, false}
	for _, tc := range []struct {
		name string
		d    dtype
		b    []byte
		want []int32
		bad  int    // index of the first value out of range, or -1
		val  string // its value
	}{
		{"i8", i8, le(8, 5, math.MaxUint64), []int32{5, -1}, -1, ""},
		{"i8 too big", i8, le(8, 1, 1<<31), nil, 1, "2147483648"},
		{"i4", dtype{'i', 4, false}, le(4, 0xffffff85, 2), []int32{-123, 2}, -1, ""},
		{"i2", dtype{'i', 2, false}, le(2, 0x8000, 7), []int32{-32768, 7}, -1, ""},
		{"i1", dtype{'i', 1, false}, le(1, 0xff, 127), []int32{-1, 127}, -1, ""},
		{"u8", dtype{'u', 8, false}, le(8, 9, 1<<63), nil, 1, "9223372036854775808"},
		{"u4", dtype{'u', 4, false}, le(4, 3, 1<<31), nil, 1, "2147483648"},
		{"u2", dtype{'u', 2, false}, le(2, 65535, 0), []int32{65535, 0}, -1, ""},
		{"u1", dtype{'u', 1, false}, le(1, 255, 4), []int32{255, 4}, -1, ""},
	} {
		dst := make([]int32, len(tc.b)/tc.d.size)
		i, v, ok := decodeIntegers(dst, tc.b, tc.d)
		switch {
		case tc.bad >= 0 && (ok || i != tc.bad || v != tc.val):
			t.Errorf("%s: got %d, %q, %v; want %d, %q out of range", tc.name, i, v, ok, tc.bad, tc.val)
		case tc.bad < 0 && (!ok || !reflect.DeepEqual(dst, tc.want)):
			t.Errorf("%s: got %v, ok %v; want %v", tc.name, dst, ok, tc.want)
		}
	}
}

// npyFile returns a .npy file: a version 1.0 header for dict, then data.
func npyFile(dict string, data []byte) []byte {
	b := []byte("\x93NUMPY\x01\x00")
	b = binary.LittleEndian.AppendUint16(b, uint16(len(dict)))
	return append(append(b, dict...), data...)
}

// npzFile returns a zip archive of the members, in order, with the method.
func npzFile(t *testing.T, method uint16, members ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, m := range members {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: m[0], Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(m[1]))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReadErrors covers the errors of the array reader, each naming the
// file and the array.
func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	f32 := func(vs ...float32) string {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		return string(b)
	}
	i64 := func(vs ...int64) string {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		return string(b)
	}
	hdr := func(descr string, shape string) string {
		return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }\n"
	}
	logits2x2 := string(npyFile(hdr("<f4", "(2, 2)"), []byte(f32(1, 2, 3, 4))))
	labels2 := string(npyFile(hdr("<i8", "(2,)"), []byte(i64(0, 1))))
	// A stored archive whose labels member has one byte flipped in its
	// data, so that its CRC-32 no longer matches.
	flipped := npzFile(t, zip.Store, [2]string{"logits.npy", logits2x2}, [2]string{"labels.npy", labels2})
	at := bytes.LastIndex(flipped, []byte(i64(0, 1)))
	flipped[at] ^= 1
	// An archive whose directory claims a huge member.
	huge := npzFile(t, zip.Store, [2]string{"logits.npy", logits2x2}, [2]string{"labels.npy", labels2})
	cd := bytes.LastIndex(huge, []byte("PK\x01\x02"))
	binary.LittleEndian.PutUint32(huge[cd+24:], 1<<30) // uncompressed size of labels.npy
	// An archive whose "classes" member has the given dtype, shape and
	// data.
	withNames := func(descr, shape, data string) []byte {
		return npzFile(t, zip.Store, [2]string{"logits.npy", logits2x2}, [2]string{"labels.npy", labels2},
			[2]string{"classes.npy", string(npyFile(hdr(descr, shape), []byte(data)))})
	}
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"no labels", npzFile(t, zip.Store, [2]string{"logits.npy", logits2x2}), `no "labels" array`},
		{"bad magic", npzFile(t, zip.Store, [2]string{"logits.npy", "NUMPY"}, [2]string{"labels.npy", labels2}), "logits: unreadable NumPy header"},
		{"version 9", npzFile(t, zip.Store, [2]string{"logits.npy", "\x93NUMPY\x09\x00\x00\x00"}, [2]string{"labels.npy", labels2}), "format version 9.0 is not supported"},
		{"bad dict", npzFile(t, zip.Deflate, [2]string{"logits.npy", string(npyFile("{'descr': 1}", nil))}, [2]string{"labels.npy", labels2}), "logits: unreadable NumPy header: descr: want a quoted string"},
		{"1-D logits", npzFile(t, zip.Store, [2]string{"logits.npy", string(npyFile(hdr("<f4", "(2,)"), []byte(f32(1, 2))))}, [2]string{"labels.npy", labels2}), "logits: shape [2], want [N, C]"},
		{"int logits", npzFile(t, zip.Store, [2]string{"logits.npy", string(npyFile(hdr("<i4", "(1, 2)"), []byte(f32(1, 2))))}, [2]string{"labels.npy", labels2}), "logits: dtype <i4, want float32 (<f4) or float64 (<f8)"},
		{"float16 logits", npzFile(t, zip.Store, [2]string{"logits.npy", string(npyFile(hdr("<f2", "(1, 2)"), []byte{0, 0, 0, 0}))}, [2]string{"labels.npy", labels2}), "logits: dtype <f2, want float32"},
		{"short data", npzFile(t, zip.Store, [2]string{"logits.npy", logits2x2[:len(logits2x2)-1]}, [2]string{"labels.npy", labels2}), "logits: shape [2 2] of <f4 needs 4·4 bytes of data, the archive entry holds 15"},
		{"shape overflow", npzFile(t, zip.Store, [2]string{"logits.npy", string(npyFile(hdr("<f4", "(4294967296, 4294967296)"), nil))}, [2]string{"labels.npy", labels2}), "logits: shape [4294967296 4294967296] of <f4 needs"},
		{"label shape", npzFile(t, zip.Store, [2]string{"logits.npy", logits2x2}, [2]string{"labels.npy", string(npyFile(hdr("<i8", "(1,)"), []byte(i64(0))))}), "labels: shape [1], want [2] (one per logits row)"},
		{"float labels", npzFile(t, zip.Deflate, [2]string{"logits.npy", logits2x2}, [2]string{"labels.npy", string(npyFile(hdr("<f8", "(2,)"), []byte(i64(0, 1))))}), "labels: dtype <f8, want an integer type"},
		{"client out of range", npzFile(t, zip.Store, [2]string{"logits.npy", logits2x2}, [2]string{"labels.npy", labels2}, [2]string{"client.npy", string(npyFile(hdr("<i8", "(2,)"), []byte(i64(1, 1<<40))))}), "client: row 1 is 1099511627776, out of range"},
		{"split out of range", npzFile(t, zip.Store, [2]string{"logits.npy", logits2x2}, [2]string{"labels.npy", labels2}, [2]string{"split.npy", string(npyFile(hdr("<i8", "(2,)"), []byte(i64(-1, 1))))}), "split: row 0 is -1, out of range"},
		{"names count", withNames("<U1", "(3,)", "a\x00\x00\x00b\x00\x00\x00c\x00\x00\x00"), "classes: shape [3], want [2] (one name per logits column)"},
		{"names 2-D", withNames("<U1", "(1, 2)", "a\x00\x00\x00b\x00\x00\x00"), "classes: shape [1 2], want [2]"},
		{"int names", withNames("<i8", "(2,)", i64(0, 1)), "classes: dtype <i8, want strings"},
		{"object names", withNames("|O", "(2,)", "\x80\x02"), "classes: dtype |O, want strings"},
		{"surrogate", withNames("<U1", "(2,)", "a\x00\x00\x00\x00\xd8\x00\x00"), "classes: element 1 holds 0xd800, which is not a Unicode code point"},
		{"beyond unicode", withNames(">U1", "(2,)", "\x00\x00\x00a\x00\x11\x00\x00"), "classes: element 1 holds 0x110000"},
		{"bad utf-8", withNames("|S1", "(2,)", "a\xff"), "not valid UTF-8"},
		{"empty name", withNames("|S1", "(2,)", "a\x00"), "class 1 has an empty name"},
		{"short names", withNames("<U2", "(2,)", "a\x00\x00\x00"), "classes: shape [2] of <U2 needs 2·8 bytes of data, the archive entry holds 4"},
		{"checksum", flipped, "labels: zip: checksum error"},
		{"huge claim", huge, "labels: archive entry claims 1073741824 bytes"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".npz")
		if err := os.WriteFile(p, tc.file, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Read(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), p+": ") {
			t.Errorf("%s: error %v, want %q prefixed by the path", tc.name, err, tc.want)
		}
	}
}

// TestEncodeStored checks that Encode writes what numpy.savez writes: a
// stored member per array, sizes and CRC-32 in the local header (no data
// descriptor), each member a .npy file.
func TestEncodeStored(t *testing.T) {
	f := &File{Logits: []float32{1, 2, 3, 4}, Labels: []int32{1, 0}, Client: []int32{4, 5}, Classes: 2}
	var buf bytes.Buffer
	if err := Encode(&buf, f); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, zf := range zr.File {
		names = append(names, zf.Name)
		if zf.Method != zip.Store || zf.Flags&0x8 != 0 {
			t.Errorf("%s: method %d, flags %#x: want stored, no data descriptor", zf.Name, zf.Method, zf.Flags)
		}
		off, err := zf.DataOffset()
		if err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()[off : off+int64(zf.CompressedSize64)]
		if crc32.ChecksumIEEE(data) != zf.CRC32 || !bytes.HasPrefix(data, []byte("\x93NUMPY\x01\x00")) || (len(data)-len(npyHeader("<f4", []int{2, 2})))%4 != 0 {
			t.Errorf("%s: bad member data % x", zf.Name, data[:10])
		}
	}
	if want := []string{"logits.npy", "labels.npy", "client.npy"}; !reflect.DeepEqual(names, want) {
		t.Errorf("members %v, want %v", names, want)
	}
}
