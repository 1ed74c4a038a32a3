package data

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// CIFAR images are 32×32 RGB, stored channel-major (1024 R, 1024 G,
// 1024 B bytes) after the label byte(s).
const (
	cifarSide   = 32
	cifarPixels = cifarSide * cifarSide * 3
)

// cifarFormat describes one of the two CIFAR binary layouts.
type cifarFormat struct {
	name       string   // spec prefix
	labelBytes int      // 1 for CIFAR-10; 2 (coarse, fine) for CIFAR-100
	subdir     string   // directory name inside the official archive
	classes    []string // class names of the label used
}

// isBatch reports whether base (a file base name) is a batch of split.
func (f *cifarFormat) isBatch(base, split string) bool {
	if f.labelBytes == 1 {
		if split == "test" {
			return base == "test_batch.bin"
		}
		return strings.HasPrefix(base, "data_batch_") && strings.HasSuffix(base, ".bin")
	}
	return base == split+".bin"
}

var cifar10 = &cifarFormat{
	name:       "cifar10",
	labelBytes: 1,
	subdir:     "cifar-10-batches-bin",
	classes: []string{
		"airplane", "automobile", "bird", "cat", "deer",
		"dog", "frog", "horse", "ship", "truck",
	},
}

var cifar100 = &cifarFormat{
	name:       "cifar100",
	labelBytes: 2,
	subdir:     "cifar-100-binary",
	classes: []string{
		"apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle", "bottle",
		"bowl", "boy", "bridge", "bus", "butterfly", "camel", "can", "castle", "caterpillar", "cattle",
		"chair", "chimpanzee", "clock", "cloud", "cockroach", "couch", "crab", "crocodile", "cup", "dinosaur",
		"dolphin", "elephant", "flatfish", "forest", "fox", "girl", "hamster", "house", "kangaroo", "keyboard",
		"lamp", "lawn_mower", "leopard", "lion", "lizard", "lobster", "man", "maple_tree", "motorcycle", "mountain",
		"mouse", "mushroom", "oak_tree", "orange", "orchid", "otter", "palm_tree", "pear", "pickup_truck", "pine_tree",
		"plain", "plate", "poppy", "porcupine", "possum", "rabbit", "raccoon", "ray", "road", "rocket",
		"rose", "sea", "seal", "shark", "shrew", "skunk", "skyscraper", "snail", "snake", "spider",
		"squirrel", "streetcar", "sunflower", "sweet_pepper", "table", "tank", "telephone", "television", "tiger", "tractor",
		"train", "trout", "tulip", "turtle", "wardrobe", "whale", "willow_tree", "wolf", "woman", "worm",
	},
}

// isCIFAR10BatchName reports whether a lower-case base name is a CIFAR-10
// batch file name.
func isCIFAR10BatchName(base string) bool {
	return cifar10.isBatch(base, "train") || cifar10.isBatch(base, "test")
}

// cifarDir returns the directory holding f's batches: dir itself or its
// subdirectory of the official archive layout, or "" when neither holds a
// training batch.
func cifarDir(dir string, f *cifarFormat) string {
	for _, d := range []string{dir, filepath.Join(dir, f.subdir)} {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.IsDir() && f.isBatch(e.Name(), "train") {
				return d
			}
		}
	}
	return ""
}

// cifarReader reads CIFAR binary records from a sequence of batch files.
type cifarReader struct {
	f     *cifarFormat
	src   files
	name  string    // current file
	cur   io.Reader // current file content; nil before the first file
	index int       // record index in the current file
	n     int       // total records when known, else -1
	buf   []byte
}

// openCIFARSpec opens "PATH[:train|test]" for format f.
func openCIFARSpec(rest string, f *cifarFormat) (Reader, error) {
	p, option := splitOption(rest)
	sp, err := split(rest, option)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	switch {
	case fi.IsDir():
		dir := cifarDir(p, f)
		if dir == "" {
			return nil, fmt.Errorf("data: %s: no %s training batches in this directory or in %s/", p, f.name, f.subdir)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		var paths []string
		for _, e := range entries { // sorted by name
			if !e.IsDir() && f.isBatch(e.Name(), sp) {
				paths = append(paths, filepath.Join(dir, e.Name()))
			}
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("data: %s: no %s %s batches", dir, f.name, sp)
		}
		return newCIFARReader(f, &pathList{paths: paths, whole: true}, cifarCount(paths, f)), nil
	case isTar(p):
		t, err := openTar(p)
		if err != nil {
			return nil, err
		}
		keep := func(name string) bool { return f.isBatch(path.Base(name), sp) }
		return newCIFARReader(f, &tarMembers{t: t, keep: keep}, -1), nil
	default:
		if option != "" {
			return nil, fmt.Errorf("data: %s: a single batch file takes no split (got %q)", p, option)
		}
		paths := []string{p}
		return newCIFARReader(f, &pathList{paths: paths, whole: true}, cifarCount(paths, f)), nil
	}
}

// cifarCount returns the number of records in uncompressed batch files, or
// -1 when a size is unknown or not a whole number of records.
func cifarCount(paths []string, f *cifarFormat) int {
	size := int64(f.labelBytes + cifarPixels)
	n := 0
	for _, p := range paths {
		s := fileSize(p)
		if s < 0 || s%size != 0 {
			return -1
		}
		n += int(s / size)
	}
	return n
}

func newCIFARReader(f *cifarFormat, src files, n int) *cifarReader {
	return &cifarReader{f: f, src: src, n: n, buf: make([]byte, f.labelBytes+cifarPixels)}
}

func (r *cifarReader) Next(rec *Record) error {
	for {
		if r.cur == nil {
			name, cur, err := r.src.next()
			if err != nil {
				return err
			}
			r.name, r.cur, r.index = name, cur, 0
		}
		n, err := io.ReadFull(r.cur, r.buf)
		if err == io.EOF {
			if r.index == 0 {
				return formatError(r.name, nil, "empty batch file")
			}
			r.cur = nil
			continue
		}
		if err != nil {
			return formatError(r.name, err, "record %d is truncated (%d of %d bytes; a %s record is %d bytes)",
				r.index, n, len(r.buf), r.f.name, len(r.buf))
		}
		break
	}
	label := int(r.buf[r.f.labelBytes-1]) // the fine label for CIFAR-100
	if label >= len(r.f.classes) {
		return formatError(r.name, nil, "record %d has label %d, want below %d (is this a %s file?)",
			r.index, label, len(r.f.classes), r.f.name)
	}
	img := rec.setImage(cifarSide, cifarSide, 3)
	px := r.buf[r.f.labelBytes:]
	const plane = cifarSide * cifarSide
	for i := range plane {
		img[3*i] = px[i]
		img[3*i+1] = px[plane+i]
		img[3*i+2] = px[2*plane+i]
	}
	rec.Label = label
	rec.Client = ""
	r.index++
	return nil
}

func (r *cifarReader) Classes() []string { return classesCopy(r.f.classes) }

// Len returns the number of records, or -1 when it is not known before
// reading (compressed or archived batches).
func (r *cifarReader) Len() int { return r.n }

func (r *cifarReader) Close() error { return r.src.Close() }
