package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/infer"
)

// skipMarker, on the line before a fenced block of the README, keeps the
// block out of TestREADME, with the reason after it.
const skipMarker = "<!-- readme-test: skip"

// readmeScript returns the README's runnable commands as one bash script:
// every ```sh block not marked with skipMarker, verbatim and in order,
// then the fedcalib commands of the ```yaml CI example. Each block starts
// with an echo naming its line, so a failure says which block failed.
func readmeScript(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		script, yaml strings.Builder
		lang         string // of the open block; "" outside blocks
		skip         bool
		prev         string
		cont         bool // a yaml command continues on the next line
		blocks       int
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case lang == "" && strings.HasPrefix(line, "```"):
			lang = strings.TrimPrefix(line, "```")
			if lang == "" {
				lang = "text"
			}
			skip = strings.HasPrefix(strings.TrimSpace(prev), skipMarker)
			if lang == "sh" && !skip {
				blocks++
				fmt.Fprintf(&script, "echo '== README.md line %d' >&2\n", n)
			}
		case lang != "" && line == "```":
			lang = ""
		case lang == "sh" && !skip:
			script.WriteString(line + "\n")
		case lang == "yaml" && !skip:
			cmd := strings.TrimSpace(line)
			if cont || strings.HasPrefix(cmd, "bin/fedcalib ") {
				if !cont {
					fmt.Fprintf(&yaml, "echo '== README.md line %d (CI example)' >&2\n", n)
				}
				yaml.WriteString(cmd + "\n")
				cont = strings.HasSuffix(cmd, "\\")
			}
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if blocks < 3 || yaml.Len() == 0 {
		t.Fatalf("%s: found %d runnable sh blocks and CI commands %q: the README lost its tour", path, blocks, yaml.String())
	}
	return script.String() + yaml.String()
}

// TestREADME runs every command block of the README verbatim, in order,
// as a new user would: in a fresh directory holding the repository's
// files (linked, not copied), with a fresh bin/ and out/.
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the README's tour end to end (about a minute)")
	}
	if _, err := infer.ResolveRuntime(""); err != nil {
		t.Skipf("ONNX Runtime not installed (run make setup): %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	script := readmeScript(t, filepath.Join(root, "README.md"))
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "bin", "out", ".git":
			continue // made fresh by the README
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's commands failed: %v\n%s", err, out)
	}
	for _, want := range []string{"out/model.calibrated.onnx", "out/model.calibration.json", "out/fedtemp-dp.json",
		"out/triton/mnist-tiny/config.pbtxt", "out/triton/mnist-tiny/labels.txt", "out/triton/mnist-tiny/1/model.onnx",
		"out/vectors/model.onnx", "out/vectors/test_data_set_0/output_1.pb",
		"out/imagenet.npz", "out/triton/imagenet/config.pbtxt", "out/imagenet-vectors/model.onnx", "out/report.html"} {
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			t.Errorf("the README's tour did not write %s: %v", want, err)
		}
	}
}
