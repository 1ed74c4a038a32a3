package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/infer"
)

// commands returns cmd and every command under it.
func commands(cmd *cobra.Command) []*cobra.Command {
	all := []*cobra.Command{cmd}
	for _, c := range cmd.Commands() {
		all = append(all, commands(c)...)
	}
	return all
}

// TestUsageHasNoBackquotes checks every flag of every command: pflag
// takes a backquoted word in a usage string for the flag's value name
// (UnquoteUsage), so `fedcalib calibrate` in a usage printed
// "--calibrator fedcalib calibrate" in --help.
func TestUsageHasNoBackquotes(t *testing.T) {
	root := newRootCmd(io.Discard, io.Discard)
	var flags int
	for _, cmd := range commands(root) {
		for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				flags++
				if strings.Contains(f.Usage, "`") {
					t.Errorf("%s --%s: usage %q has a backquote", cmd.CommandPath(), f.Name, f.Usage)
				}
			})
		}
	}
	if flags < 50 {
		t.Errorf("visited %d flags: the walk missed commands", flags)
	}
	// How the fixed flags render.
	for _, tt := range []struct{ cmd, line string }{
		{"export", `--calibrator string          the calibrator file written by "fedcalib calibrate"`},
		{"check", `--model string                  an ONNX model: calibrated by "fedcalib export"`},
	} {
		code, stdout, _ := fedcalib(tt.cmd, "--help")
		if code != ExitOK || !strings.Contains(stdout, tt.line) {
			t.Errorf("%s --help: exit %d, no line %q in\n%s", tt.cmd, code, tt.line, stdout)
		}
	}
}

// TestVersion checks that --version and the version command print the
// module version, the commit, the Go version and the ONNX Runtime version
// a command would load.
func TestVersion(t *testing.T) {
	wantORT := "ONNX Runtime: not installed ("
	if p, err := infer.ResolveRuntime(""); err == nil {
		if c, _ := infer.CachedRuntimePath(); p == c {
			wantORT = "ONNX Runtime: " + infer.RuntimeVersion + " (" + p + ")"
		} else {
			wantORT = "ONNX Runtime: "
		}
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, stdout, stderr := fedcalib(args...)
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		if code != ExitOK || stderr != "" || len(lines) != 4 {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want 4 lines", args, code, stdout, stderr)
		}
		for i, want := range []string{"fedcalib " + Version(), "commit: ", "go: " + runtime.Version() + " ", wantORT} {
			if !strings.HasPrefix(lines[i], want) {
				t.Errorf("%v: line %d is %q, want it to start with %q", args, i+1, lines[i], want)
			}
		}
	}
	// Without --version or a command, the root prints its help.
	if code, stdout, _ := fedcalib(); code != ExitOK || !strings.Contains(stdout, "Exit status:") {
		t.Errorf("fedcalib alone: exit %d, stdout %q", code, stdout)
	}
}

// TestMainContextCancelled runs export with a cancelled context, as
// SIGINT leaves it: exit ExitInterrupted, one line on stderr, no output
// and no temporary file.
func TestMainContextCancelled(t *testing.T) {
	if _, err := infer.InitRuntime(""); err != nil {
		t.Skipf("ONNX Runtime not installed: %v", err)
	}
	dir := t.TempDir()
	cf := filepath.Join(dir, "temp.json")
	if err := calib.WriteFile(cf, calib.NewTemperature(3), nil, calib.Provenance{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	out := filepath.Join(dir, "m.onnx")
	code := MainContext(ctx, []string{"export", "--model", "../infer/testdata/tiny.onnx", "--calibrator", cf, "--out", out}, &stdout, &stderr)
	want := "fedcalib: stopped (context canceled): no partial output was left behind\n"
	if code != ExitInterrupted || stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, stdout.String(), stderr.String(), ExitInterrupted, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want the calibrator only", len(entries))
	}
}
