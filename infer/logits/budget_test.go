package logits

import (
	"archive/zip"
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/klauspost/compress/flate"
)

// declaredArchive returns an archive whose logits and labels declare
// rows × classes and rows, but hold only the first `hold` bytes of their
// data (then end); deflated or stored. The directory's sizes are those
// the headers declare, within the DEFLATE ratio, as a zip bomb's are;
// the compressed data of a deflated entry are padded with zeros to the
// size the directory gives, as a bomb's would be data.
func declaredArchive(t testing.TB, rows, classes int, hold int, deflate bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name, descr string, shape []int, elem int) {
		hdr := npyHeader(descr, shape)
		n := uint64(elem)
		for _, d := range shape {
			n *= uint64(d)
		}
		usize := uint64(len(hdr)) + n
		data := append(hdr, make([]byte, min(hold, int(n)))...)
		fh := &zip.FileHeader{Name: name + ".npy", UncompressedSize64: usize}
		var raw []byte
		if deflate {
			var c bytes.Buffer
			fw, _ := flate.NewWriter(&c, flate.BestSpeed)
			fw.Write(data)
			fw.Flush()
			raw = c.Bytes()
			fh.Method = zip.Deflate
			if need := int(usize/maxDeflateRatio) + 1; len(raw) < need {
				raw = append(raw, make([]byte, need-len(raw))...)
			}
		} else {
			fh.Method = zip.Store
			raw = data
			fh.UncompressedSize64 = uint64(len(raw))
		}
		fh.CompressedSize64 = uint64(len(raw))
		w, err := zw.CreateRaw(fh)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(raw)
	}
	add("logits", "<f4", []int{rows, classes}, 4)
	add("labels", "<i8", []int{rows}, 8)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestMemoryBudget(t *testing.T) {
	f := &File{Classes: 10, Labels: make([]int32, 1000), Logits: make([]float32, 10000), Split: make([]uint8, 1000)}
	var buf bytes.Buffer
	if err := Encode(&buf, f); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	const columns = 1000*4 + 1000 // labels as int32, split
	const need = columns + 1000*10*4
	for _, tc := range []struct {
		budget               int64
		columns, all, blocks bool // what succeeds
	}{
		{need, true, true, true},
		{need - 1, true, false, false},
		{columns, true, false, false},
		{columns - 1, false, false, false},
		{0, true, true, true}, // the default
	} {
		a, err := openArchive(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		a.SetMemoryBudget(tc.budget)
		_, err = a.ReadColumns()
		check := func(what string, ok bool, err error) {
			t.Helper()
			if ok != (err == nil) || (!ok && !errors.Is(err, ErrOverBudget)) {
				t.Errorf("budget %d: %s: %v, want success %v or ErrOverBudget", tc.budget, what, err, ok)
			}
		}
		check("ReadColumns", tc.columns, err)
		_, err = a.readAll()
		check("Read", tc.all, err)
		check("CheckBudget", tc.all, a.CheckBudget())
		bl, err := a.Blocks()
		if err == nil {
			bl.Close()
		}
		check("Blocks", tc.blocks, err)
	}
}

// TestDeclaredSizes reads archives that declare far more than they hold:
// within the budget, what is allocated follows the data read, not the
// declaration; beyond it, nothing is read.
func TestDeclaredSizes(t *testing.T) {
	for _, tc := range []struct {
		name          string
		rows, classes int
		deflate       bool
		overBudget    bool
	}{
		{"bomb 10^10 logits", 100000, 100000, true, true},
		{"wide", 10, 1 << 28, true, true},
		{"deflated, within budget, short", 200000, 100, true, false},
		{"stored, short", 2000, 10, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := declaredArchive(t, tc.rows, tc.classes, 1000, tc.deflate)
			a, err := openArchive(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				if !tc.deflate {
					return // stored entries shorter than declared: corrupt
				}
				t.Fatal(err)
			}
			a.SetMemoryBudget(256 << 20)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err = a.readAll()
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatal("an archive holding 1000 bytes of its data was read")
			}
			if got := errors.Is(err, ErrOverBudget); got != tc.overBudget {
				t.Errorf("error %v: over budget %v, want %v", err, got, tc.overBudget)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
				t.Errorf("allocated %d bytes reading 1000 bytes of data", alloc)
			}
			if _, err := a.Blocks(); tc.overBudget && !errors.Is(err, ErrOverBudget) {
				t.Errorf("Blocks: %v, want ErrOverBudget", err)
			}
		})
	}
}

// FuzzDeclaredSizes checks, for any declared shape, that reading an
// archive holding little of its data allocates about what it reads (or
// nothing, beyond the budget), and never panics.
func FuzzDeclaredSizes(f *testing.F) {
	f.Add(uint32(100000), uint32(100000), uint16(1000), true)
	f.Add(uint32(3), uint32(5000), uint16(0), false)
	f.Add(uint32(1<<31-1), uint32(2), uint16(7), true)
	f.Add(uint32(0), uint32(0), uint16(0), true)
	f.Fuzz(func(t *testing.T, rows, classes uint32, hold uint16, deflate bool) {
		r, c := int(rows%(1<<31)), int(classes%(1<<31))
		if uint64(r)*uint64(c)*4/maxDeflateRatio > 64<<20 || uint64(r)*8/maxDeflateRatio > 64<<20 {
			return // the padding a bomb needs would be too large to build here
		}
		b := declaredArchive(t, r, c, int(hold), deflate)
		a, err := openArchive(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		const budget = 8 << 20
		a.SetMemoryBudget(budget)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, err := a.readAll()
		if bl, berr := a.Blocks(); berr == nil {
			var blk Block
			for bl.Next(&blk, 1000) == nil {
			}
			bl.Close()
		}
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*budget+uint64(len(b)) {
			t.Fatalf("%d × %d declared, %d bytes held: allocated %d", r, c, hold, alloc)
		}
		if err == nil && (got.Len() != r || len(got.Logits) != r*c) {
			t.Fatalf("read %d rows of %d logits, want %d × %d", got.Len(), len(got.Logits), r, c)
		}
	})
}
