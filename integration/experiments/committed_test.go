package experiments

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/experiment"
	"github.com/fedcalib/fedcalib/zoo"
)

// committedLogits returns the committed logits files
// (models/logits/NAME.npz) by model name.
func committedLogits(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../../models/logits/*.npz")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		out[strings.TrimSuffix(filepath.Base(p), ".npz")] = p
	}
	return out
}

var (
	cardLogitsSHA = regexp.MustCompile("logits file sha256\\s+`([0-9a-f]{64})`")
	cardModelSHA  = regexp.MustCompile("from the model of sha256\\s+`([0-9a-f]{64})`")
)

// TestCommittedLogits checks each committed logits file against its
// model card: the file's SHA-256 and the model's are those the card's
// "Committed logits" section records, and the values hash to what the
// file's provenance says (zoo.Verify).
func TestCommittedLogits(t *testing.T) {
	files := committedLogits(t)
	if len(files) == 0 {
		t.Fatal("no committed logits under models/logits")
	}
	for name, path := range files {
		card, err := os.ReadFile(filepath.Join("../../models", name, "CARD.md"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		fm, mm := cardLogitsSHA.FindSubmatch(card), cardModelSHA.FindSubmatch(card)
		if fm == nil || mm == nil {
			t.Errorf("%s: CARD.md records no \"logits file sha256\" and \"from the model of sha256\"", name)
			continue
		}
		p, err := zoo.Verify(path, string(fm[1]), string(mm[1]))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if p.Model != name || len(p.Sources) == 0 {
			t.Errorf("%s: provenance names model %q and %d sources", name, p.Model, len(p.Sources))
		}
	}
}

// TestCommittedCells recomputes a sample of the cells of Tables 1 and 2
// (weighted FedBBQ and FedTemp, seed 3, on every dataset whose logits
// are committed) and checks that each row equals the committed row of
// the same cell byte for byte: `make experiments` recomputes them all.
func TestCommittedCells(t *testing.T) {
	files := committedLogits(t)
	for _, table := range []string{"table1", "table2"} {
		cfg, err := experiment.ReadConfig(table + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		var keep []experiment.Dataset
		for _, d := range cfg.Datasets {
			if p, ok := files[d.Name]; ok {
				if abs, _ := filepath.Abs(p); d.Logits != abs && d.Logits != p {
					t.Errorf("%s: dataset %s reads %s, not its committed logits %s", table, d.Name, d.Logits, p)
					continue
				}
				keep = append(keep, d)
			}
		}
		if len(keep) == 0 {
			t.Fatalf("%s: no dataset reads committed logits", table)
		}
		cfg.Datasets = keep
		for i := range cfg.Grids {
			g := &cfg.Grids[i]
			g.Method, g.Weighting, g.Seed = []string{"bbq", "temp"}, []string{"all"}, []uint64{3}
		}
		cfg.Plots = nil
		dir := t.TempDir()
		if _, err := experiment.Run(context.Background(), cfg, dir, experiment.Options{Workers: 2}); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		got := csvLines(t, filepath.Join(dir, experiment.RunsFile))
		want := csvLines(t, filepath.Join("results", table, experiment.RunsFile))
		if len(got) != 2*len(keep) {
			t.Errorf("%s: %d rows recomputed, want %d", table, len(got), 2*len(keep))
		}
		for id, line := range got {
			switch w, ok := want[id]; {
			case !ok:
				t.Errorf("%s: cell %s is not in the committed runs.csv: %s", table, id, line)
			case w != line:
				t.Errorf("%s: cell %s\n got  %s\n want %s", table, id, line, w)
			}
		}
	}
}

// csvLines returns the data lines of a runs.csv by cell ID.
func csvLines(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for first := true; sc.Scan(); first = false {
		if first {
			continue
		}
		id, _, _ := strings.Cut(sc.Text(), ",")
		out[id] = sc.Text()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
