package experiment

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

func TestConfigErrors(t *testing.T) {
	const data = `
datasets:
  - name: d
    logits: x.npz
    partition: {file: p.json}
`
	const grid = `
grid:
  method: bbq
  rounds: 1
  seed: 1
`
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"empty", "", "empty configuration"},
		{"unknown key", data + grid + "grdi: 1\n", "line 11: unknown key grdi"},
		{"unknown grid key", data + "grid:\n  method: bbq\n  rounds: 1\n  seed: 1\n  epsilom: 1\n", "line 10: unknown key epsilom"},
		{"no datasets", grid, "datasets: none given"},
		{"bad input", "datasets:\n  - {name: d, logits: x.npz, input: softmax, partition: {file: p.json}}\n" + grid, `input "softmax": want logits or probabilities`},
		{"no grid", data, "grid: none given"},
		{"grid and grids", data + grid + "grids: [{method: temp, rounds: 1, seed: 1}]\n", "grid and grids: give one"},
		{"unknown method", data + strings.Replace(grid, "bbq", "bbqq", 1), `grid: method[0]: unknown method "bbqq"`},
		{"no method", data + "grid:\n  rounds: 1\n  seed: 1\n", "method: missing"},
		{"no rounds", data + "grid:\n  method: bbq\n  seed: 1\n", "rounds: missing"},
		{"no seed", data + "grid:\n  method: bbq\n  rounds: 1\n", "seed: missing"},
		{"zero rounds", data + "grid:\n  method: bbq\n  rounds: [3, 0]\n  seed: 1\n", "rounds[1] is 0: want 1 to 10000 rounds"},
		{"clients per round", "datasets:\n  - {name: d, logits: x.npz, partition: {clients: 4, beta: 1}}\n" + grid + "  clients_per_round: [2, 1000000000]\n", "clients_per_round[1] is 1000000000: the partition has 4 clients"},
		{"huge rounds", data + "grid:\n  method: bbq\n  rounds: 1000000000\n  seed: 1\n", "rounds[0] is 1000000000: want 1 to 10000 rounds"},
		{"negative seed", data + "grid:\n  method: bbq\n  rounds: 1\n  seed: [1, -1]\n", "line 9: cannot unmarshal !!int `-1` as a seed: seeds are integers from 0 to 18446744073709551615"},
		{"negative partition seed", "datasets:\n  - {name: d, logits: x.npz, partition: {clients: 3, beta: 1, seed: -2}}\n" + grid, "cannot unmarshal !!int `-2` as a seed"},
		{"alpha z without privacy", data + grid + "  weighting: all\n  dp_alpha_z: 2\n", "dp_alpha_z: applies to private runs, and epsilon has no value > 0"},
		{"server lr zero", data + "grid:\n  method: temp\n  rounds: 1\n  seed: 1\n  server_lr: 0\n", "server_lr[0]: server learning rate is 0"},
		{"clip pos zero", data + grid + "  epsilon: 1\n  clip_pos: 0\n", "clip_pos[0]: clip norm C₊ is 0"},
		{"epsilon zero", data + grid + "  epsilon: [none, 0]\n", "0 is not allowed: write none"},
		{"epsilon negative", data + grid + "  epsilon: -1\n", "grid: epsilon[0]: ε is -1: want a finite number > 0, or none for no privacy"},
		{"epsilon word", data + grid + "  epsilon: lots\n", `"lots" is neither a number nor none`},
		{"epsilon inf", data + grid + "  epsilon: .inf\n", "ε is +Inf"},
		{"delta one", data + grid + "  delta: 1\n", "δ is 1: want 0 < δ < 1"},
		{"alpha z", data + grid + "  dp_alpha_z: -1\n", "dp_alpha_z[0] is -1"},
		{"mexp", data + grid + "  mexp: 0\n", "mexp[0] is 0: want M in [1, 16]"},
		{"weighting", data + grid + "  weighting: most\n", `unknown weighting "most"`},
		{"accountant", data + grid + "  accountant: pld\n", `accountant "pld"`},
		{"both samplings", data + grid + "  sample_rate: 0.1\n  clients_per_round: 3\n", "sample_rate and clients_per_round both"},
		{"sample rate", data + grid + "  sample_rate: 1.5\n", "sample_rate[0] is 1.5"},
		{"clip none private", data + "grid:\n  method: temp\n  rounds: 1\n  seed: 1\n  epsilon: 1\n  clip: none\n", "a private scaling run needs a clip norm"},
		{"beta on file", data + grid + "  beta: 0.1\n", "the grid varies beta but the dataset's partition is fixed"},
		{"no beta", "datasets:\n  - {name: d, logits: x.npz, partition: {clients: 10}}\n" + grid, "no beta is given"},
		{"two partitions", "datasets:\n  - {name: d, logits: x.npz, partition: {clients: 10, file: p.json}}\n" + grid, "exactly one of file"},
		{"no partition", "datasets:\n  - {name: d, logits: x.npz}\n" + grid, "exactly one of file"},
		{"no logits", "datasets:\n  - {name: d, partition: {natural: true}}\n" + grid, "logits: missing"},
		{"bad fractions", "datasets:\n  - {name: d, logits: x.npz, partition: {clients: 3, beta: 1, fractions: {train: 0.5, calibration: 0.5, test: 0.5}}}\n" + grid, "fractions 0.5/0.5/0.5"},
		{"rule on file", "datasets:\n  - {name: d, logits: x.npz, partition: {file: p.json, rule: given}}\n" + grid, "rule and min_samples apply to natural"},
		{"twice", data + "  - name: d\n    logits: y.npz\n    partition: {natural: true}\n" + grid, `name "d" is used twice`},
		{"unset variable", "datasets:\n  - {name: d, logits: $FEDCALIB_TEST_UNSET/x.npz, partition: {natural: true}}\n" + grid, "$FEDCALIB_TEST_UNSET is not set"},
		{"plot x", data + grid + "plots:\n  - {name: p, x: method, y: cwece}\n", `plots[0]: x "method"`},
		{"plot y", data + grid + "plots:\n  - {name: p, x: rounds, y: accuracy_drop}\n", `plots[0]: y "accuracy_drop"`},
		{"plot name", data + grid + "plots:\n  - {name: a/b, x: rounds, y: cwece}\n", `plots[0]: name "a/b"`},
		{"summary metric", data + grid + "summary:\n  metrics: [cwece, wall]\n", `unknown metric "wall"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FEDCALIB_TEST_UNSET", "")
			_, err := ParseConfig([]byte(tc.yaml), "/cfg")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestReadConfigPaths(t *testing.T) {
	dir := t.TempDir()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory")
	}
	t.Setenv("FEDCALIB_TEST_LOGITS", "/data/logits")
	t.Setenv("FEDCALIB_TEST_EMPTY", "")
	path := filepath.Join(dir, "exp.yaml")
	os.WriteFile(path, []byte(`
datasets:
  - {name: a, logits: "${FEDCALIB_TEST_LOGITS:-~/cache}/a.npz", partition: {file: ../p.json.gz}}
  - {name: b, logits: "${FEDCALIB_TEST_EMPTY:-~/cache}/b.npz", partition: {natural: true}}
  - {name: c, logits: "$FEDCALIB_TEST_LOGITS/c.npz", partition: {clients: 5, beta: 0.1, holdout: p.json}}
grid: {method: temp, rounds: 1, seed: 1}
`), 0o644)
	cfg, err := ReadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{cfg.Datasets[0].Logits, cfg.Datasets[0].Partition.File, cfg.Datasets[1].Logits, cfg.Datasets[2].Logits, cfg.Datasets[2].Partition.Holdout}
	want := []string{"/data/logits/a.npz", filepath.Join(filepath.Dir(dir), "p.json.gz"), filepath.Join(home, "cache/b.npz"), "/data/logits/c.npz", filepath.Join(dir, "p.json")}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("path %d: %q, want %q", i, got[i], want[i])
		}
	}
	if cfg.Name != "exp" {
		t.Errorf("name %q, want the file's base name exp", cfg.Name)
	}
}

func TestExpandEnv(t *testing.T) {
	t.Setenv("FC_A", "alpha")
	t.Setenv("FC_EMPTY", "")
	for _, tc := range []struct{ in, want, err string }{
		{"plain/path", "plain/path", ""},
		{"$FC_A/x", "alpha/x", ""},
		{"${FC_A}x", "alphax", ""},
		{"${FC_EMPTY:-d}", "d", ""},
		{"${FC_UNSET_X:-${FC_A}/y}", "alpha/y", ""},
		{"a$", "a$", ""},
		{"$5", "$5", ""},
		{"${FC_UNSET_X}", "", "$FC_UNSET_X is not set"},
		{"${FC_A", "", "unclosed"},
		{"${}", "", "bad variable name"},
	} {
		got, err := expandEnv(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestCellsBlankUnusedParameters(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
datasets:
  - {name: d, logits: x.npz, partition: {file: p.json}}
  - {name: leaf, logits: y.npz, partition: {natural: true}, clients_per_round: 60}
grid:
  method: [bbq, temp]
  weighting: [none, all]
  rounds: [1, 5]
  epsilon: [none, 1]
  clip_pos: [5, 10]
  dp_alpha_z: [0, 2]
  seed: 7
`), "")
	if err != nil {
		t.Fatal(err)
	}
	cells, err := cfg.Cells()
	if err != nil {
		t.Fatal(err)
	}
	// Per dataset and T: FedBBQ without weighting 1 without privacy + 2
	// C₊ with; with weighting 1 + 2 C₊ × 2 z; FedTemp 1 + 1. So 10 per T,
	// 20 per dataset.
	if len(cells) != 40 {
		t.Fatalf("%d cells, want 40", len(cells))
	}
	counts := map[string]int{}
	for _, c := range cells {
		counts[c.Dataset+" "+c.Label()]++
		switch {
		case c.Method == "temp" && (c.Weighting != "" || c.Mexp != 0 || c.ClipPos != 0 || c.ServerLR != 1):
			t.Errorf("FedTemp keeps binning parameters: %+v", c)
		case c.Method == "temp" && c.Epsilon > 0 && c.Clip != dp.DefaultClip:
			t.Errorf("private FedTemp clip %v, want %v", c.Clip, dp.DefaultClip)
		case c.Method == "temp" && c.Epsilon == 0 && c.Clip != 0:
			t.Errorf("FedTemp without privacy clips at %v by default", c.Clip)
		case c.Method == "bbq" && (c.Clip != 0 || c.ServerLR != 0 || c.Mexp != calib.DefaultMexp):
			t.Errorf("FedBBQ keeps scaling parameters or lacks M = 7: %+v", c)
		case c.Epsilon == 0 && (c.Delta != 0 || c.ClipPos != 0 || c.ClipNeg != 0 || c.Accountant != ""):
			t.Errorf("a run without privacy keeps privacy parameters: %+v", c)
		case c.Epsilon > 0 && (c.Delta != 1e-5 || c.Accountant != "zcdp"):
			t.Errorf("private defaults: %+v", c)
		case c.AlphaZ != 0 && (c.Epsilon == 0 || c.Weighting != calib.WeightAll):
			t.Errorf("z kept where the DP weighting does not run: %+v", c)
		case c.Dataset == "leaf" && (c.ClientsPerRound != 60 || c.SampleRate != 0):
			t.Errorf("dataset sampling not applied: %+v", c)
		case c.Dataset == "d" && (c.SampleRate != 0.1 || c.ClientsPerRound != 0):
			t.Errorf("default sampling: %+v", c)
		}
	}
	if counts["d FedBBQ"] != 6 || counts["d FedBBQ all weight"] != 10 || counts["d FedTemp"] != 4 {
		t.Errorf("cells per method: %v", counts)
	}
	// Grid order: method, weighting, rounds, ..., seed fastest.
	first := []string{"bbq none 1 ", "bbq none 1 1", "bbq none 1 1", "bbq none 5 "}
	for i, w := range first {
		c := cells[i]
		if got := c.Method + " " + string(c.Weighting) + " " + c.param("rounds") + " " + c.param("epsilon"); got != w {
			t.Errorf("cell %d: %q, want %q", i, got, w)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(tinyConfig))
	f.Add([]byte("grids:\n  - {method: bbq, rounds: [1, 2], seed: 1, epsilon: [none, 3]}\ndatasets: [{name: a, logits: a.npz, partition: {natural: true}}]\n"))
	f.Add([]byte("datasets: [{name: a, logits: ${X:-~}/a, partition: {clients: 3, beta: 1}}]\ngrid: {method: temp, rounds: 1, seed: 1, clip: none}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		t.Setenv("X", "")
		cfg, err := ParseConfig(b, "/base")
		if err != nil {
			return
		}
		// A valid configuration expands without panicking, and every cell
		// has a method and rounds.
		cells, err := cfg.Cells()
		if err != nil {
			return
		}
		for _, c := range cells {
			if c.Method == "" || c.Rounds < 1 {
				t.Fatalf("cell %+v", c)
			}
			if len(cells) > 10000 {
				break
			}
		}
	})
}
