package diagram

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

func TestWrite(t *testing.T) {
	// Three examples, two classes: confident and partly wrong.
	probs := []float64{0.9, 0.1, 0.8, 0.2, 0.3, 0.7}
	labels := []int{0, 1, 1}
	before, err := calib.NewReliability(probs, labels, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	after, err := calib.NewReliability([]float64{0.6, 0.4, 0.5, 0.5, 0.3, 0.7}, labels, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "plots")
	if d := os.Getenv("DIAGRAM_OUT"); d != "" {
		dir = d
	}
	paths, err := Write(dir, before, after, Options{ClassNames: []string{"cat", "dog"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"top.png", "top.svg", "classes.png", "classes.svg"}
	if len(paths) != len(want) {
		t.Fatalf("wrote %v, want %v", paths, want)
	}
	for i, p := range paths {
		if filepath.Base(p) != want[i] {
			t.Errorf("path %d = %s, want %s", i, p, want[i])
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(p) {
		case ".png":
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if img.Bounds().Dx() < 100 {
				t.Errorf("%s: width %d", p, img.Bounds().Dx())
			}
		case ".svg":
			if !bytes.Contains(b, []byte("<svg")) {
				t.Errorf("%s is not SVG", p)
			}
			if strings.HasPrefix(filepath.Base(p), "classes") && !bytes.Contains(b, []byte("dog · calibrated")) {
				t.Errorf("%s lacks the class name", p)
			}
		}
	}
	if _, err := Write(dir, nil, nil, Options{}); err == nil {
		t.Error("Write(nil) succeeded")
	}
}

// TestControlCharacters: names with characters SVG cannot hold still give
// SVG that parses, with the characters as U+FFFD.
func TestControlCharacters(t *testing.T) {
	bins := Outcomes{Conf: []float64{0.2, 0.9}, Hit: []float64{0, 1}}.Bins(5, EqualWidth)
	fig, err := Classes([]CurveSet{{Label: "a\x01<b>", Classes: [][]Bin{bins, bins}}}, Options{ClassNames: []string{"\x02", "ok"}})
	if err != nil {
		t.Fatal(err)
	}
	svg, err := fig.SVG()
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the SVG does not parse: %v", err)
		}
	}
	if !bytes.Contains(svg, []byte("\uFFFD · a\uFFFD&lt;b&gt;")) {
		t.Error("the names are not drawn with U+FFFD")
	}
}
