package zoo

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/internal/npy"
)

// Format names the provenance record's layout; Provenance.Format holds it.
const Format = "fedcalib.zoo-logits/v1"

// Member is the archive member that holds the provenance record.
const Member = "provenance.npy"

// maxProvenance bounds the provenance member: a record names a few files.
const maxProvenance = 1 << 20

// Provenance says where a committed logits file comes from. The zero
// value records nothing; Pack fills Format, Rows, Classes and
// LogitsSHA256.
type Provenance struct {
	// Format is the record's layout, Format.
	Format string `json:"format"`
	// Model is the zoo model's name, such as "mnist-cnn".
	Model string `json:"model"`
	// ModelSHA256 is the hex SHA-256 of the ONNX file the logits were
	// computed with (the one its card records).
	ModelSHA256 string `json:"model_sha256"`
	// Sources are the data sets read, in row order.
	Sources []Source `json:"sources"`
	// Subset, when not nil, says that the logits are those of a fixed
	// subset of a larger data set (Subset.Of), which Sources hold.
	Subset *Subset `json:"subset,omitempty"`
	// Producer says what computed the logits, such as "fedcalib infer
	// (commit 8ed7d0f), ONNX Runtime 1.20.1, 1 thread".
	Producer string `json:"producer,omitempty"`
	// Rows and Classes are the logits array's shape.
	Rows    int `json:"rows"`
	Classes int `json:"classes"`
	// LogitsSHA256 is the hex SHA-256 of the float32 logits (little
	// endian, row-major), the labels (int64 little endian) and the class
	// names (each followed by a NUL), hashed in that order: it names the
	// values whatever container holds them, so the file infer wrote and
	// the packed one can be compared.
	LogitsSHA256 string `json:"logits_sha256"`
}

// Source is one data set spec a committed logits file was computed on.
type Source struct {
	// Spec is the fedcalib data spec with its path shortened to the
	// file or folder name, such as "imagefolder:cifar10-jpeg.tar.gz:train".
	Spec string `json:"spec"`
	// Decoder says how the records became the model's input, such as
	// "IDX, gzip" or "JPEG: libjpeg-turbo (TurboJPEG, islow IDCT)".
	Decoder string `json:"decoder"`
	// Files are the files read, each with its SHA-256: the archive, or
	// the folder's regular files in name order.
	Files []FileSum `json:"files"`
}

// FileSum is a file's base name and hex SHA-256.
type FileSum struct {
	// Name is the file's last path element.
	Name string `json:"name"`
	// SHA256 is the hex SHA-256 of its bytes.
	SHA256 string `json:"sha256"`
}

// ValuesSHA256 returns the LogitsSHA256 of f (see Provenance).
func ValuesSHA256(f *logits.File) string {
	h := sha256.New()
	var b [8]byte
	for _, v := range f.Logits {
		binary.LittleEndian.PutUint32(b[:4], math.Float32bits(v))
		h.Write(b[:4])
	}
	for _, y := range f.Labels {
		binary.LittleEndian.PutUint64(b[:], uint64(int64(y)))
		h.Write(b[:])
	}
	for _, s := range f.ClassNames {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Pack writes f to path as a committed logits file: the arrays
// logits.Encode writes, each deflated at the best compression, then the
// provenance member holding p with Format, Rows, Classes and
// LogitsSHA256 set from f. The bytes depend only on f and p.
func Pack(path string, f *logits.File, p Provenance) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	p.Format, p.Rows, p.Classes, p.LogitsSHA256 = Format, f.Len(), f.Classes, ValuesSHA256(f)
	var plain bytes.Buffer
	if err := logits.Encode(&plain, f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	zr, err := zip.NewReader(bytes.NewReader(plain.Bytes()), int64(plain.Len()))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(w, flate.BestCompression)
	})
	add := func(name string, data []byte) error {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate})
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	for _, zf := range zr.File {
		rc, err := zf.Open()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := add(zf.Name, data); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	rec, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("%s: provenance: %w", path, err)
	}
	if err := add(Member, stringArray(string(rec))); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return fileio.Write(path, out.Bytes())
}

// stringArray returns the .npy bytes of a one-element NumPy string
// array (<U…, UCS-4) holding s, as numpy.array([s]) makes it.
func stringArray(s string) []byte {
	n := max(1, utf8.RuneCountInString(s))
	dict := fmt.Sprintf("{'descr': '<U%d', 'fortran_order': False, 'shape': (1,), }", n)
	// Pad with spaces and a newline to a multiple of 64 bytes (10 bytes of
	// magic, version and length come first), as NumPy does.
	pad := 64 - (10+len(dict)+1)%64
	if pad == 64 {
		pad = 0
	}
	dict += strings.Repeat(" ", pad) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
	binary.LittleEndian.PutUint16(b[8:], uint16(len(dict)))
	b = append(b, dict...)
	k := 0
	for _, r := range s {
		b = binary.LittleEndian.AppendUint32(b, uint32(r))
		k++
	}
	return append(b, make([]byte, 4*(n-k))...)
}

// ErrNoProvenance is returned (wrapped) by ReadProvenance for a logits
// file without a provenance member: one fedcalib infer wrote, not Pack.
var ErrNoProvenance = errors.New("no provenance member: not a committed logits file (zoo.Pack writes one)")

// ReadProvenance reads the provenance record of the committed logits
// file at path.
func ReadProvenance(path string) (*Provenance, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer zr.Close()
	for _, zf := range zr.File {
		if zf.Name != Member {
			continue
		}
		if zf.UncompressedSize64 > maxProvenance {
			return nil, fmt.Errorf("%s: %s declares %d bytes, more than %d", path, Member, zf.UncompressedSize64, maxProvenance)
		}
		rc, err := zf.Open()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer rc.Close()
		s, err := readString(io.LimitReader(rc, maxProvenance))
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, Member, err)
		}
		var p Provenance
		if err := json.Unmarshal([]byte(s), &p); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, Member, err)
		}
		if p.Format != Format {
			return nil, fmt.Errorf("%s: provenance format %q, want %q", path, p.Format, Format)
		}
		return &p, nil
	}
	return nil, fmt.Errorf("%s: %w", path, ErrNoProvenance)
}

// readString reads a one-element little-endian UCS-4 string array.
func readString(r io.Reader) (string, error) {
	h, _, err := npy.ReadHeader(r)
	if err != nil {
		return "", err
	}
	var n int
	if _, err := fmt.Sscanf(h.Descr, "<U%d", &n); err != nil || len(h.Shape) != 1 || h.Shape[0] != 1 || n <= 0 {
		return "", fmt.Errorf("dtype %s shape %v, want one <U string", h.Descr, h.Shape)
	}
	if n > maxProvenance/4 {
		return "", fmt.Errorf("a string of %d characters is too long", n)
	}
	b := make([]byte, 4*n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	var sb strings.Builder
	for i := 0; i < len(b); i += 4 {
		c := rune(binary.LittleEndian.Uint32(b[i:]))
		if c == 0 {
			break
		}
		if !utf8.ValidRune(c) {
			return "", fmt.Errorf("code point %#x is not valid", c)
		}
		sb.WriteRune(c)
	}
	return sb.String(), nil
}

// FileSHA256 returns a FileSum of the file at path.
func FileSHA256(path string) (FileSum, error) {
	h, err := fileio.SHA256(path)
	if err != nil {
		return FileSum{}, err
	}
	return FileSum{Name: baseName(path), SHA256: h}, nil
}

// Files returns the FileSums of path: the file itself, or a folder's
// regular files in name order.
func Files(path string) ([]FileSum, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		s, err := FileSHA256(path)
		if err != nil {
			return nil, err
		}
		return []FileSum{s}, nil
	}
	ents, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, err
	}
	var out []FileSum
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		s, err := FileSHA256(path + string(os.PathSeparator) + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no regular files", path)
	}
	return out, nil
}

func baseName(path string) string {
	path = strings.TrimRight(path, "/")
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// decoders names, per data spec kind, how infer turns its records into
// the model's input.
var decoders = map[string]string{
	"mnist":       "IDX (gzip), uint8 pixels, then the model's fedcalib.input.* preprocessing",
	"fashion":     "IDX (gzip), uint8 pixels, then the model's fedcalib.input.* preprocessing",
	"imagefolder": "JPEG: libjpeg-turbo through its TurboJPEG API (islow IDCT, fancy upsampling; PIL's pixels exactly), then the model's fedcalib.input.* preprocessing",
	"leaf":        "LEAF JSON float pixels as written, then the model's fedcalib.input.* preprocessing",
	"roles":       "LEAF Shakespeare role text, 80-character windows",
}

// NewSource returns the Source of a fedcalib data spec KIND:PATH[:SPLIT]:
// its spec with PATH shortened to its last element, the decoder of KIND,
// and the SHA-256 of the files at PATH (see Files).
func NewSource(spec string) (Source, error) {
	kind, rest, ok := strings.Cut(spec, ":")
	if !ok || rest == "" {
		return Source{}, fmt.Errorf("data spec %q: want KIND:PATH[:SPLIT]", spec)
	}
	dec, ok := decoders[kind]
	if !ok {
		return Source{}, fmt.Errorf("data spec %q: no decoder recorded for kind %q", spec, kind)
	}
	path, split := rest, ""
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		path, split = rest[:i], rest[i:]
	}
	files, err := Files(path)
	if err != nil {
		return Source{}, fmt.Errorf("data spec %q: %w", spec, err)
	}
	return Source{Spec: kind + ":" + baseName(path) + split, Decoder: dec, Files: files}, nil
}

// Verify checks the committed logits file at path: its SHA-256 is
// fileSHA (skipped when empty), its provenance names the model with
// SHA-256 modelSHA (skipped when empty), and its values hash to the
// record's LogitsSHA256 with the recorded shape. It returns the record.
func Verify(path, fileSHA, modelSHA string) (*Provenance, error) {
	if fileSHA != "" {
		h, err := fileio.SHA256(path)
		if err != nil {
			return nil, err
		}
		if h != fileSHA {
			return nil, fmt.Errorf("%s: sha256 %s, want %s", path, h, fileSHA)
		}
	}
	p, err := ReadProvenance(path)
	if err != nil {
		return nil, err
	}
	if modelSHA != "" && p.ModelSHA256 != modelSHA {
		return nil, fmt.Errorf("%s: computed with the model of sha256 %s, want %s", path, p.ModelSHA256, modelSHA)
	}
	f, err := logits.Read(path)
	if err != nil {
		return nil, err
	}
	if f.Len() != p.Rows || f.Classes != p.Classes {
		return nil, fmt.Errorf("%s: %d×%d logits, the record says %d×%d", path, f.Len(), f.Classes, p.Rows, p.Classes)
	}
	if h := ValuesSHA256(f); h != p.LogitsSHA256 {
		return nil, fmt.Errorf("%s: values hash to %s, the record says %s", path, h, p.LogitsSHA256)
	}
	return p, nil
}
