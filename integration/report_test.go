package integration

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fedcalib/fedcalib/report"
)

// chromium returns the path of a headless Chromium, from chromium.sh
// (which installs Debian's package where FEDCALIB_INSTALL_CHROMIUM=1 and
// it can), or skips the test saying why there is none.
func chromium(t *testing.T) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("bash", "chromium.sh")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("no headless Chromium to render the report in: %s", strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out))
}

// consoleLine matches a line of Chromium's log that reports a message of
// the page's console (an error, a refused load, a log call).
var consoleLine = regexp.MustCompile(`:CONSOLE[:(]`)

// render opens page in headless Chromium with its network and extras off
// and returns the DOM it built and the console messages it logged; with
// shot not empty it takes a screenshot of width×height pixels there
// instead of dumping the DOM.
func render(t *testing.T, bin, page, shot string, width, height int) (dom string, console []string) {
	t.Helper()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
		"--virtual-time-budget=5000"}
	if shot != "" {
		args = append(args, "--window-size="+strconv.Itoa(width)+","+strconv.Itoa(height), "--screenshot="+shot)
	} else {
		args = append(args, "--dump-dom")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, "file://"+page)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if consoleLine.MatchString(l) {
			console = append(console, l)
		}
	}
	return stdout.String(), console
}

// TestReportInBrowser writes a report with the binary (a temperature
// calibrator fitted by calibrate --report, and report comparing it with
// the model), checks the HTML (well-formed, no external reference), then
// renders it in headless Chromium: the page must load without a single
// console message, build every figure, and give a screenshot at desktop
// and phone widths. A page that breaks its Content-Security-Policy must
// log console messages, or the check could not fail. With
// $REPORT_SCREENSHOT_DIR set the screenshots are copied there (the
// README's is made so).
func TestReportInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("renders the report in headless Chromium (seconds)")
	}
	browser := chromium(t)
	bin := fedcalibBin(t)
	dir := t.TempDir()
	lf := filepath.Join(dir, "model.npz")
	writeBadLogits(t, lf, 2000, 4, false)
	cal, calReport := filepath.Join(dir, "temp.json"), filepath.Join(dir, "calibrate.html")
	if out, code := run(t, bin, "calibrate", "--central", "--method", "temp", "--logits", lf, "--out", cal, "--report", calReport); code != 0 {
		t.Fatalf("calibrate --report: exit %d\n%s", code, out)
	}
	page := filepath.Join(dir, "report.html")
	if out, code := run(t, bin, "report", "--logits", lf, "--calibrator", cal, "--bootstrap", "100", "--out", page); code != 0 {
		t.Fatalf("report: exit %d\n%s", code, out)
	}
	for _, p := range []string{page, calReport} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := report.Check(b); err != nil {
			t.Errorf("%s does not validate: %v", filepath.Base(p), err)
		}
	}

	// The negative control: a page that loads an image and runs a script
	// against the report's policy.
	bad := filepath.Join(dir, "bad.html")
	os.WriteFile(bad, []byte(`<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:" /></head>`+
		`<body><img src="http://127.0.0.1:9/x.png" /><script>console.error("x")</script></body></html>`), 0o644)
	if _, console := render(t, browser, bad, "", 0, 0); len(console) == 0 {
		t.Fatal("a page breaking its policy logged no console message: the check below could not fail")
	}

	dom, console := render(t, browser, page, "", 0, 0)
	if len(console) > 0 {
		t.Errorf("the report logged console messages:\n%s", strings.Join(console, "\n"))
	}
	for _, id := range []string{"verdict", "metrics", "reliability", "smooth", "equal-mass", "classes", "fits", "privacy", "provenance"} {
		if !strings.Contains(dom, `<section id="`+id+`">`) {
			t.Errorf("the rendered page has no section %q", id)
		}
	}
	if n := strings.Count(dom, "<svg "); n != 4 {
		t.Errorf("the rendered page has %d figures, want 4", n)
	}
	if n := strings.Count(dom, "<path "); n < 100 {
		t.Errorf("the figures hold %d paths: not drawn", n)
	}

	// Printable: Chromium prints it (with the print style sheet) to a PDF.
	pdf := filepath.Join(dir, "report.pdf")
	printArgs := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--user-data-dir=" + t.TempDir(), "--no-pdf-header-footer", "--print-to-pdf=" + pdf, "file://" + page}
	if out, err := exec.Command(browser, printArgs...).CombinedOutput(); err != nil {
		t.Fatalf("print to PDF: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(pdf); err != nil || !bytes.HasPrefix(b, []byte("%PDF")) || len(b) < 20000 {
		t.Errorf("printing gave no PDF of the report (%d bytes, %v)", len(b), err)
	}

	shots := map[string][2]int{"report-desktop.png": {1200, 2600}, "report-phone.png": {390, 1600}}
	for name, size := range shots {
		shot := filepath.Join(dir, name)
		_, console := render(t, browser, page, shot, size[0], size[1])
		if len(console) > 0 {
			t.Errorf("%s: console messages:\n%s", name, strings.Join(console, "\n"))
		}
		b, err := os.ReadFile(shot)
		if err != nil {
			t.Fatalf("no screenshot: %v", err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := img.Bounds().Size(); got != (image.Point{X: size[0], Y: size[1]}) {
			t.Errorf("%s is %v, want %v", name, got, size)
		}
		if f := inked(img); f < 0.05 {
			t.Errorf("%s: only %.1f%% of its pixels are not white: nothing rendered", name, 100*f)
		}
		if d := os.Getenv("REPORT_SCREENSHOT_DIR"); d != "" {
			os.WriteFile(filepath.Join(d, name), b, 0o644)
		}
	}
}

// inked returns the fraction of img's pixels that are not near white.
func inked(img image.Image) float64 {
	b := img.Bounds()
	var n int
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0xe000 || g < 0xe000 || bl < 0xe000 {
				n++
			}
		}
	}
	return float64(n) / float64((b.Dx()+1)/2*((b.Dy()+1)/2))
}
