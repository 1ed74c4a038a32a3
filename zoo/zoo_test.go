package zoo

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer/logits"
)

func sample() *logits.File {
	return &logits.File{
		Classes:    3,
		Logits:     []float32{1, -2.5, 0.25, 3, 0, -1},
		Labels:     []int32{2, 0},
		ClassNames: []string{"cat", "dög", "bird"},
	}
}

func sampleProvenance() Provenance {
	return Provenance{Model: "toy", ModelSHA256: strings.Repeat("ab", 32), Producer: "test",
		Sources: []Source{{Spec: "leaf:toy.tar.gz:train", Decoder: "d", Files: []FileSum{{Name: "toy.tar.gz", SHA256: strings.Repeat("cd", 32)}}}}}
}

// TestValuesSHA256 hashes the bytes written out by hand: float32 1.0 is
// 0x3f800000, -2.5 0xc0200000, 0.25 0x3e800000, 3.0 0x40400000, -1.0
// 0xbf800000, little endian; labels as int64; names NUL-terminated.
func TestValuesSHA256(t *testing.T) {
	var b []byte
	for _, w := range []string{"0000803f", "000020c0", "0000803e", "00004040", "00000000", "000080bf",
		"0200000000000000", "0000000000000000"} {
		x, _ := hex.DecodeString(w)
		b = append(b, x...)
	}
	b = append(b, "cat\x00d\xc3\xb6g\x00bird\x00"...)
	want := sha256.Sum256(b)
	if got := ValuesSHA256(sample()); got != hex.EncodeToString(want[:]) {
		t.Errorf("ValuesSHA256 = %s, want %x", got, want)
	}
}

func TestPackRoundTrip(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.npz"), filepath.Join(dir, "b.npz")
	for _, p := range []string{a, b} {
		if err := Pack(p, sample(), sampleProvenance()); err != nil {
			t.Fatal(err)
		}
	}
	ba, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ba, bb) {
		t.Error("packing the same logits twice gave different bytes")
	}
	// Every member deflated; the arrays are those infer writes, plus the record.
	zr, err := zip.OpenReader(a)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, zf := range zr.File {
		names = append(names, zf.Name)
		if zf.Method != zip.Deflate {
			t.Errorf("%s: method %d, want deflate", zf.Name, zf.Method)
		}
	}
	zr.Close()
	if want := []string{"logits.npy", "labels.npy", "classes.npy", Member}; !reflect.DeepEqual(names, want) {
		t.Errorf("members %v, want %v", names, want)
	}
	f, err := logits.Read(a)
	if err != nil {
		t.Fatal(err)
	}
	s := sample()
	if !reflect.DeepEqual(f.Logits, s.Logits) || !reflect.DeepEqual(f.Labels, s.Labels) || !reflect.DeepEqual(f.ClassNames, s.ClassNames) {
		t.Errorf("read back %+v, want %+v", f, s)
	}
	want := sampleProvenance()
	want.Format, want.Rows, want.Classes, want.LogitsSHA256 = Format, 2, 3, ValuesSHA256(s)
	p, err := Verify(a, "", want.ModelSHA256)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*p, want) {
		t.Errorf("provenance %+v, want %+v", *p, want)
	}
}

func TestVerifyRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.npz")
	if err := Pack(good, sample(), sampleProvenance()); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain.npz")
	if err := logits.Write(plain, sample()); err != nil {
		t.Fatal(err)
	}
	// A record whose hash is not the values': built by hand.
	var buf bytes.Buffer
	if err := logits.Encode(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	zr, _ := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	for _, zf := range zr.File {
		w, _ := zw.Create(zf.Name)
		rc, _ := zf.Open()
		var b bytes.Buffer
		b.ReadFrom(rc)
		w.Write(b.Bytes())
	}
	rec := sampleProvenance()
	rec.Format, rec.Rows, rec.Classes, rec.LogitsSHA256 = Format, 2, 3, strings.Repeat("0", 64)
	j, _ := json.Marshal(rec)
	w, _ := zw.Create(Member)
	w.Write(stringArray(string(j)))
	zw.Close()
	tampered := filepath.Join(dir, "tampered.npz")
	os.WriteFile(tampered, out.Bytes(), 0o644)

	for _, tc := range []struct {
		name, path, fileSHA, modelSHA, want string
	}{
		{"file sha", good, strings.Repeat("1", 64), "", "sha256"},
		{"model sha", good, "", strings.Repeat("2", 64), "computed with the model"},
		{"no record", plain, "", "", "no provenance member"},
		{"values", tampered, "", "", "values hash to"},
	} {
		_, err := Verify(tc.path, tc.fileSHA, tc.modelSHA)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := ReadProvenance(plain); !errors.Is(err, ErrNoProvenance) {
		t.Errorf("ReadProvenance of an infer file: %v, want ErrNoProvenance", err)
	}
}

func TestNewSource(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "b.gz"), []byte("bee"), 0o644)
	os.WriteFile(filepath.Join(dir, "a.gz"), []byte("a"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	arch := filepath.Join(t.TempDir(), "x.tar.gz")
	os.WriteFile(arch, []byte("abc"), 0o644)
	// sha256 of "a", "bee" and "abc" (sha256sum; "abc" is FIPS 180-2's vector).
	const shaA, shaBee, shaABC = "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb",
		"62cb81b5904a262ffaeed02abef36bfc540b09f964b8b0b636662f77ffce6714",
		"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	for _, tc := range []struct {
		spec string
		want Source
	}{
		{"mnist:" + dir + ":all", Source{Spec: "mnist:" + filepath.Base(dir) + ":all", Decoder: decoders["mnist"],
			Files: []FileSum{{"a.gz", shaA}, {"b.gz", shaBee}}}},
		{"leaf:" + arch + ":test", Source{Spec: "leaf:x.tar.gz:test", Decoder: decoders["leaf"], Files: []FileSum{{"x.tar.gz", shaABC}}}},
		{"roles:" + arch, Source{Spec: "roles:x.tar.gz", Decoder: decoders["roles"], Files: []FileSum{{"x.tar.gz", shaABC}}}},
	} {
		got, err := NewSource(tc.spec)
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.spec, got, tc.want)
		}
	}
	for _, bad := range []string{"nokind", "csv:" + arch, "leaf:" + filepath.Join(dir, "missing") + ":train"} {
		if _, err := NewSource(bad); err == nil {
			t.Errorf("NewSource(%q) succeeded", bad)
		}
	}
}

// TestNumPyReads: NumPy loads a packed file, reads the record as a string
// and hashes the values to the record's LogitsSHA256 by its own route.
func TestNumPyReads(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil || exec.Command(py, "-c", "import numpy").Run() != nil {
		t.Skip("python3 with numpy is not installed")
	}
	path := filepath.Join(t.TempDir(), "p.npz")
	if err := Pack(path, sample(), sampleProvenance()); err != nil {
		t.Fatal(err)
	}
	const script = `
import hashlib, json, sys
import numpy as np
z = np.load(sys.argv[1])
p = json.loads(str(z["provenance"][0]))
h = hashlib.sha256(z["logits"].astype("<f4").tobytes() + z["labels"].astype("<i8").tobytes())
for c in z["classes"]:
    h.update(str(c).encode() + b"\0")
print(p["model"], p["rows"], h.hexdigest() == p["logits_sha256"])
`
	out, err := exec.Command(py, "-c", script, path).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "toy 2 True" {
		t.Errorf("numpy says %q, want \"toy 2 True\"", got)
	}
}
