package federation

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/klauspost/compress/gzip"
)

func TestSource(t *testing.T) {
	data := synthSet(400, 4, 1)
	client := make([]int32, data.Len())
	for i := range client {
		client[i] = int32(i % 7)
	}
	want, err := Dirichlet(data.Labels, data.Classes, 5, 0.3, PartitionOptions{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plain := filepath.Join(dir, "p.json")
	if err := WritePartition(plain, want); err != nil {
		t.Fatal(err)
	}
	// The model zoo ships gzip-compressed partition files.
	var buf bytes.Buffer
	if err := want.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	zw.Write(buf.Bytes())
	zw.Close()
	zipped := filepath.Join(dir, "p.json.gz")
	if err := os.WriteFile(zipped, zbuf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src  Source
		desc string
	}{
		{Source{File: plain}, "p.json"},
		{Source{File: zipped}, "p.json.gz"},
		{Source{Clients: 5, Beta: 0.3, Seed: 9}, "Dirichlet β = 0.3"},
	} {
		got, desc, err := tc.src.Partition(data.Labels, data.Classes, nil, nil)
		if err != nil {
			t.Fatalf("%+v: %v", tc.src, err)
		}
		if desc != tc.desc || !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: got %q and a different partition: %v", tc.src, desc, !reflect.DeepEqual(got, want))
		}
	}
	nat, desc, err := Source{Seed: 2}.Partition(data.Labels, data.Classes, client, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantNat, _ := Natural(data.Labels, data.Classes, client, nil, NaturalOptions{Seed: 2})
	if desc != "the data's client column" || !reflect.DeepEqual(nat, wantNat) || nat.Len() != 7 {
		t.Errorf("natural: %q, %d clients", desc, nat.Len())
	}

	if _, _, err := (Source{}).Partition(data.Labels, data.Classes, nil, nil); !errors.Is(err, ErrNoClientColumn) {
		t.Errorf("natural without a client column: %v", err)
	}
	other := synthSet(401, 4, 1)
	if _, _, err := (Source{File: zipped}).Partition(other.Labels, other.Classes, nil, nil); !errors.Is(err, ErrMismatch) {
		t.Errorf("mismatched file: %v", err)
	}
	if _, _, err := (Source{File: plain, Clients: 3}).Partition(data.Labels, data.Classes, nil, nil); err == nil {
		t.Error("a file with a number of clients: no error")
	}
	broken := filepath.Join(dir, "broken.json.gz")
	os.WriteFile(broken, zbuf.Bytes()[:zbuf.Len()/2], 0o644)
	if _, err := ReadPartition(broken); err == nil {
		t.Error("truncated gzip partition: no error")
	}
}
