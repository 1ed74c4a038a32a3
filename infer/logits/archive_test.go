package logits

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// readBlocks reads every row of the archive held by b through Blocks,
// rows at a time, and returns them as a File (without client column or
// class names), checking each block's First.
func readBlocks(t *testing.T, b []byte, rows int) (*File, error) {
	t.Helper()
	a, err := openArchive(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	bl, err := a.Blocks()
	if err != nil {
		return nil, err
	}
	defer bl.Close()
	f := &File{Classes: a.NumClasses(), Logits: []float32{}, Labels: []int32{}}
	if a.Has("split") {
		f.Split = []uint8{}
	}
	var blk Block
	for {
		err := bl.Next(&blk, rows)
		if err == io.EOF {
			if blk.Len() != 0 {
				t.Fatalf("Next returned io.EOF with %d rows", blk.Len())
			}
			break
		}
		if err != nil {
			if again := bl.Next(&blk, rows); again != err {
				t.Fatalf("Next after the error %v = %v, want the same error", err, again)
			}
			return nil, err
		}
		if blk.First != f.Len() || blk.Len() == 0 || blk.Len() > rows || len(blk.Logits) != blk.Len()*f.Classes {
			t.Fatalf("block First %d, %d rows, %d logits after %d rows (at most %d a block)", blk.First, blk.Len(), len(blk.Logits), f.Len(), rows)
		}
		f.Logits = append(f.Logits, blk.Logits...)
		f.Labels = append(f.Labels, blk.Labels...)
		if f.Split != nil {
			f.Split = append(f.Split, blk.Split...)
		}
	}
	if err := bl.Next(&blk, rows); err != io.EOF {
		t.Fatalf("Next after the end = %v, want io.EOF", err)
	}
	return f, nil
}

// TestBlocksEqualRead reads every fixture (NumPy's, every dtype and
// order, stored and deflated) and random files a block at a time, in
// blocks of several sizes, and compares the rows with Read's.
func TestBlocksEqualRead(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.npz")
	if err != nil || len(paths) < 20 {
		t.Fatalf("fixtures: %v, %v", paths, err)
	}
	files := map[string][]byte{}
	for _, p := range paths {
		files[p] = mustRead(t, p)
	}
	// Larger than one read buffer (blockSize), so that blocks cross it.
	rng := rand.New(rand.NewPCG(1, 2))
	big := &File{Classes: 7, Labels: make([]int32, 40000), Split: make([]uint8, 40000)}
	for i := range big.Labels {
		big.Labels[i] = int32(rng.IntN(7))
		big.Split[i] = uint8(rng.IntN(3))
		for range 7 {
			big.Logits = append(big.Logits, float32(rng.NormFloat64()))
		}
	}
	var buf bytes.Buffer
	if err := Encode(&buf, big); err != nil {
		t.Fatal(err)
	}
	files["random 40000×7"] = buf.Bytes()
	for name, b := range files {
		want, err := decode(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want.Client, want.ClassNames = nil, nil
		for _, rows := range []int{1, 2, 3, 4096, 1 << 20} {
			got, err := readBlocks(t, b, rows)
			if err != nil {
				t.Fatalf("%s, blocks of %d: %v", name, rows, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s, blocks of %d rows: %+v, want %+v", name, rows, got, want)
			}
		}
	}
}

// TestArchiveColumnsFirst reads the columns, then the logits, as a
// federated run does, and checks both halves against Read.
func TestArchiveColumnsFirst(t *testing.T) {
	want, err := Read("testdata/numpy_small.npz")
	if err != nil {
		t.Fatal(err)
	}
	a, err := Open("testdata/numpy_small.npz")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Len() != 2 || a.NumClasses() != 3 || !a.Has("client") || a.Has("classes") {
		t.Errorf("Len %d, NumClasses %d, client %v, classes %v; want 2, 3, true, false", a.Len(), a.NumClasses(), a.Has("client"), a.Has("classes"))
	}
	f, err := a.ReadColumns()
	if err != nil {
		t.Fatal(err)
	}
	if f.Logits != nil || !reflect.DeepEqual(f.Labels, want.Labels) || !reflect.DeepEqual(f.Client, want.Client) || !reflect.DeepEqual(f.Split, want.Split) {
		t.Fatalf("ReadColumns = %+v, want the columns of %+v and no logits", f, want)
	}
	if err := a.ReadLogits(f); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("ReadColumns + ReadLogits = %+v, want %+v", f, want)
	}
	other := &File{Classes: 3, Labels: []int32{0}}
	if err := a.ReadLogits(other); err == nil || !strings.Contains(err.Error(), "not its columns") {
		t.Errorf("ReadLogits into another file's columns: %v", err)
	}
}

// TestBlocksErrors checks that Blocks finds what Read finds, naming the
// row in the file (not in the block): a bad value in a later block, and
// a corrupt byte that only the entry's CRC-32 reveals, at the end.
func TestBlocksErrors(t *testing.T) {
	hdr := func(descr, shape string) string {
		return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }\n"
	}
	var logits6x2, labels6, split6 []byte
	for i := range 6 {
		logits6x2 = binary.LittleEndian.AppendUint32(logits6x2, math.Float32bits(float32(2*i)))
		logits6x2 = binary.LittleEndian.AppendUint32(logits6x2, math.Float32bits(float32(2*i+1)))
		labels6 = binary.LittleEndian.AppendUint64(labels6, uint64(i%2))
		split6 = append(split6, byte(i%3))
	}
	member := func(name, descr, shape string, data []byte) [2]string {
		return [2]string{name, string(npyFile(hdr(descr, shape), data))}
	}
	logits := member("logits.npy", "<f4", "(6, 2)", logits6x2)
	labels := member("labels.npy", "<i8", "(6,)", labels6)
	set := func(b []byte, at int, v byte) []byte { b = bytes.Clone(b); b[at] = v; return b }
	inf := bytes.Clone(logits6x2)
	binary.LittleEndian.PutUint32(inf[4*9:], math.Float32bits(float32(math.Inf(1))))
	flipped := npzFile(t, zip.Store, logits, labels)
	at := bytes.LastIndex(flipped, labels6)
	flipped[at+8*3] ^= 1 // row 3's label 1 becomes 0: valid, but the CRC-32 no longer matches
	for _, tt := range []struct {
		name string
		b    []byte
		want string
	}{
		{"label", npzFile(t, zip.Store, logits, member("labels.npy", "<i8", "(6,)", set(labels6, 8*5, 9))), "labels: row 5 is 9, outside [0, 2)"},
		{"logit", npzFile(t, zip.Deflate, member("logits.npy", "<f4", "(6, 2)", inf), labels), "logits: row 4, class 1 is +Inf"},
		{"split", npzFile(t, zip.Store, logits, labels, member("split.npy", "|u1", "(6,)", set(split6, 4, 3))), "split: row 4 is 3: want 0"},
		{"split dtype", npzFile(t, zip.Store, logits, labels, member("split.npy", "<i8", "(6,)", set(labels6, 8*4+1, 1))), "split: row 4 is 256, out of range"},
		{"checksum", flipped, "labels: zip: checksum error"},
	} {
		_, readErr := decode(bytes.NewReader(tt.b), int64(len(tt.b)))
		_, err := readBlocks(t, tt.b, 2)
		if err == nil || readErr == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(readErr.Error(), tt.want) {
			t.Errorf("%s: Blocks: %v; Read: %v; want both to contain %q", tt.name, err, readErr, tt.want)
		}
	}
}

func TestBlocksNextPanicsOnNoRows(t *testing.T) {
	a, err := Open("testdata/numpy_small.npz")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bl, err := a.Blocks()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Next(…, 0) did not panic")
		}
	}()
	bl.Next(&Block{}, 0)
}

// mustRead returns the bytes of the file at path.
func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
