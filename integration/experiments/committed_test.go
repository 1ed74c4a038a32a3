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
	"github.com/fedcalib/fedcalib/internal/fileio"
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
// model card: the file's SHA-256 is one the card's "Committed logits"
// section records and the model's the one it records, and the values
// hash to what the file's provenance says (zoo.Verify). A file is named
// after its model (its provenance's), or after the model with "-subset"
// when it holds a fixed subset of the model's data (a subset record).
func TestCommittedLogits(t *testing.T) {
	files := committedLogits(t)
	if len(files) == 0 {
		t.Fatal("no committed logits under models/logits")
	}
	for name, path := range files {
		rec, err := zoo.ReadProvenance(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		want := rec.Model
		if rec.Subset != nil {
			want += "-subset"
		}
		if name != want {
			t.Errorf("%s: provenance names model %q (subset: %v): the file should be %s.npz", name, rec.Model, rec.Subset != nil, want)
			continue
		}
		card, err := os.ReadFile(filepath.Join("../../models", rec.Model, "CARD.md"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		fms, mm := cardLogitsSHA.FindAllSubmatch(card, -1), cardModelSHA.FindSubmatch(card)
		if fms == nil || mm == nil {
			t.Errorf("%s: CARD.md records no \"logits file sha256\" and \"from the model of sha256\"", name)
			continue
		}
		sum, err := fileio.SHA256(path)
		if err != nil {
			t.Fatal(err)
		}
		fileSHA := string(fms[0][1])
		for _, fm := range fms {
			if string(fm[1]) == sum {
				fileSHA = sum
			}
		}
		p, err := zoo.Verify(path, fileSHA, string(mm[1]))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(p.Sources) == 0 || (p.Subset != nil && (len(p.Subset.Of) == 0 || p.Subset.Clients < 1)) {
			t.Errorf("%s: provenance names %d sources, subset %+v", name, len(p.Sources), p.Subset)
		}
	}
}

// TestCommittedCells recomputes a sample of the cells of Tables 1 and 2
// and of their shakespeare-lstm-subset configurations (weighted FedBBQ
// and FedTemp, seed 3, on every dataset whose logits are committed) and checks that each row equals the committed row of
// the same cell byte for byte: `make experiments` recomputes them all.
func TestCommittedCells(t *testing.T) {
	files := committedLogits(t)
	for _, table := range []string{"table1", "table2", "table1-shakespeare-subset", "table2-shakespeare-subset"} {
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
