package zoo

import (
	"archive/zip"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/data"
)

// rolesFixture writes three role files of plain letters and spaces (so
// that LEAF's cleaning leaves them as they are) and returns the roles
// spec, the role names in file order and their texts.
func rolesFixture(t *testing.T) (string, []string, []string) {
	t.Helper()
	dir := t.TempDir()
	names := []string{"ALPHA", "BRAVO", "CHARLIE"}
	var texts []string
	for k, n := range names {
		var b strings.Builder
		for i := 0; b.Len() < 90+7*k; i++ {
			b.WriteByte("abcdefgh ijklmnop qrstuvwxyz"[(i*(k+3)+k)%28])
		}
		texts = append(texts, b.String())
		if err := os.WriteFile(filepath.Join(dir, n+".txt"), []byte(texts[k]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return "roles:" + dir, names, texts
}

type window struct {
	text, user string
	label      int
}

func TestMakeSubset(t *testing.T) {
	spec, names, texts := rolesFixture(t)
	// The windows derived by hand: role k's i-th window is
	// texts[k][i:i+80], labelled with the next letter.
	var all []window
	var labels []int
	var client []int32
	for k, s := range texts {
		for i := 0; i+data.WindowLen < len(s); i++ {
			w := window{s[i : i+data.WindowLen], names[k], strings.IndexByte(data.ShakespeareLetters, s[i+data.WindowLen])}
			all = append(all, w)
			labels = append(labels, w.label)
			client = append(client, int32(k))
		}
	}
	full, err := federation.Natural(labels, len(data.ShakespeareLetters), client, nil, federation.NaturalOptions{
		Seed: 3, Rule: federation.RuleFractions, Fractions: federation.Fractions{Train: 0.5, Calibration: 0.25, Test: 0.25}})
	if err != nil {
		t.Fatal(err)
	}
	for k := range full.Clients {
		full.Clients[k].Name = names[full.Clients[k].ID]
	}
	splits := []federation.Split{federation.Calibration, federation.Test}
	out := filepath.Join(t.TempDir(), "sub.json")
	sub, err := MakeSubset([]string{spec}, full, SubsetOptions{Clients: 2, Seed: 5, Splits: splits}, out)
	if err != nil {
		t.Fatal(err)
	}
	keep, _ := federation.SampleClients(3, 2, 5)
	// The expected subset: the kept clients' calibration and test rows,
	// client by client, each in increasing order.
	var want []window
	var wantSplit []federation.Split
	_, fullSplit := full.Columns()
	for _, k := range keep {
		c := full.Clients[k]
		rows := append(slices.Clone(c.Calibration), c.Test...)
		slices.Sort(rows)
		for _, i := range rows {
			want = append(want, all[i])
			wantSplit = append(wantSplit, federation.Split(fullSplit[i]))
		}
	}
	r, err := data.Open("leaf:" + out)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []window
	var rec data.Record
	for r.Next(&rec) == nil {
		got = append(got, window{rec.Text, rec.Client, rec.Label})
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the subset file holds %d windows, want %d:\n got  %.3v\n want %.3v", len(got), len(want), got, want)
	}
	if sub.Len() != 2 || sub.Data.Examples != len(want) {
		t.Fatalf("subset partition: %d clients, %d examples; want 2, %d", sub.Len(), sub.Data.Examples, len(want))
	}
	_, subSplit := sub.Columns()
	for j := range want {
		if federation.Split(subSplit[j]) != wantSplit[j] {
			t.Errorf("subset row %d is %v, its row of the whole data %v", j, federation.Split(subSplit[j]), wantSplit[j])
		}
	}
	subLabels := make([]int, len(want))
	for j, w := range want {
		subLabels[j] = w.label
	}
	if err := sub.Check(subLabels, len(data.ShakespeareLetters)); err != nil {
		t.Error(err)
	}
	for k, c := range sub.Clients {
		if c.Name != names[full.Clients[keep[k]].ID] || len(c.Train) != 0 {
			t.Errorf("client %d: %s with %d train rows, want %s with none", k, c.Name, len(c.Train), names[keep[k]])
		}
	}

	// A partition of other data is refused.
	other := *full
	other.Data.LabelsSHA256 = strings.Repeat("0", 64)
	if _, err := MakeSubset([]string{spec}, &other, SubsetOptions{Clients: 2, Seed: 5, Splits: splits}, out); !errors.Is(err, federation.ErrMismatch) {
		t.Errorf("other data: %v, want ErrMismatch", err)
	}
	// A partition whose client names are not the data's roles is refused.
	renamed := *full
	renamed.Clients = slices.Clone(full.Clients)
	for k := range renamed.Clients {
		renamed.Clients[k].Name = "X" + renamed.Clients[k].Name
	}
	if _, err := MakeSubset([]string{spec}, &renamed, SubsetOptions{Clients: 2, Seed: 5, Splits: splits}, out); err == nil || !strings.Contains(err.Error(), "belongs to") {
		t.Errorf("renamed clients: %v", err)
	}
	if _, err := MakeSubset([]string{spec}, full, SubsetOptions{Clients: 4, Seed: 5, Splits: splits}, out); err == nil {
		t.Error("4 of 3 clients: no error")
	}
}

func TestParseSplits(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []federation.Split
	}{
		{"calibration,test", []federation.Split{federation.Calibration, federation.Test}},
		{"train", []federation.Split{federation.Train}},
		{"test, train", []federation.Split{federation.Test, federation.Train}},
	} {
		got, err := ParseSplits(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseSplits(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "calib", "test,,train"} {
		if _, err := ParseSplits(in); err == nil {
			t.Errorf("ParseSplits(%q): no error", in)
		}
	}
}

// TestPackSubset: a subset record survives packing, and a record without
// one writes no "subset" key (so packing the other zoo files again gives
// their committed bytes).
func TestPackSubset(t *testing.T) {
	dir := t.TempDir()
	p := sampleProvenance()
	p.Subset = &Subset{Of: p.Sources, Partition: FileSum{Name: "p.json.gz", SHA256: strings.Repeat("ef", 32)},
		Clients: 100, Seed: 1, Splits: []string{"calibration", "test"}}
	path := filepath.Join(dir, "s.npz")
	if err := Pack(path, sample(), p); err != nil {
		t.Fatal(err)
	}
	got, err := ReadProvenance(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Subset, p.Subset) {
		t.Errorf("subset %+v, want %+v", got.Subset, p.Subset)
	}
	plain := filepath.Join(dir, "plain.npz")
	if err := Pack(plain, sample(), sampleProvenance()); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	rc, err := zr.Open(Member)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := readString(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rec, `"sources"`) || strings.Contains(rec, `"subset"`) {
		t.Errorf("a record without a subset: %s", rec)
	}
}
