package zoo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/data"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

// Subset records that a committed logits file holds a fixed subset of a
// data set too large to commit: the rows, in some splits, of Clients
// clients of the data's partition drawn with Seed
// (federation.SampleClients), renumbered by federation.Partition.Subset.
// The file's Sources then name the LEAF JSON that MakeSubset wrote from
// the whole data (Decoder SubsetDecoder).
type Subset struct {
	// Of are the whole data set's sources, in row order.
	Of []Source `json:"of"`
	// Partition is the partition file of the whole data set the clients
	// were drawn from.
	Partition FileSum `json:"partition"`
	// Clients is the number of clients drawn, and Seed the seed they were
	// drawn with.
	Clients int    `json:"clients"`
	Seed    uint64 `json:"seed"`
	// Splits are the splits kept ("train", "calibration", "test").
	Splits []string `json:"splits"`
}

// SubsetDecoder is the Decoder of the source MakeSubset writes.
const SubsetDecoder = "LEAF JSON that zoo-logits subset wrote from the records of subset.of " +
	"(each kept row's input and label as that reader decoded them), then the model's fedcalib.input.* preprocessing"

// ParseSplits parses a comma-separated list of split names ("train",
// "calibration", "test").
func ParseSplits(s string) ([]federation.Split, error) {
	var out []federation.Split
	for _, name := range strings.Split(s, ",") {
		k := slices.IndexFunc([]federation.Split{federation.Train, federation.Calibration, federation.Test},
			func(sp federation.Split) bool { return sp.String() == strings.TrimSpace(name) })
		if k < 0 {
			return nil, fmt.Errorf("split %q: want train, calibration or test", name)
		}
		out = append(out, federation.Split(k))
	}
	return out, nil
}

// SubsetOptions says which subset MakeSubset makes. The zero value is not
// valid: Clients must be at least 1 and Splits not empty.
type SubsetOptions struct {
	// Clients is the number of clients drawn, Seed their seed.
	Clients int
	Seed    uint64
	// Splits are the splits of each drawn client kept.
	Splits []federation.Split
}

// MakeSubset reads the records of the data specs (in row order, as infer
// reads them), checks that full was made for them, draws opt.Clients of
// its clients with opt.Seed, and writes the rows of opt.Splits of those
// clients, in the subset's row order, to dataPath as a LEAF JSON file (one
// user per client, named as the partition names it) that `fedcalib infer
// --data leaf:dataPath` reads. It then reads that file back and checks
// each record against the whole data's, and returns the subset's
// partition. Only text records (Shakespeare windows) are supported.
func MakeSubset(specs []string, full *federation.Partition, opt SubsetOptions, dataPath string) (*federation.Partition, error) {
	keep, err := federation.SampleClients(full.Len(), opt.Clients, opt.Seed)
	if err != nil {
		return nil, err
	}
	labels, classes, err := readLabels(specs)
	if err != nil {
		return nil, err
	}
	if err := full.Check(labels, len(classes)); err != nil {
		return nil, err
	}
	sub, rows, err := full.Subset(keep, opt.Splits, labels)
	if err != nil {
		return nil, err
	}
	// The subset's records, in its row order.
	pos := make(map[int]int, len(rows))
	for j, i := range rows {
		pos[i] = j
	}
	recs := make([]data.Record, len(rows))
	err = eachRecord(specs, func(i int, rec *data.Record) error {
		j, ok := pos[i]
		if !ok {
			return nil
		}
		if rec.Text == "" {
			return fmt.Errorf("row %d is not a text record: only text data sets can be written as a LEAF JSON subset", i)
		}
		recs[j] = data.Record{Text: rec.Text, Label: rec.Label, Client: rec.Client}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Each client's rows are contiguous in the subset; name its user.
	users := make([]string, sub.Len())
	var start int
	bounds := make([]int, sub.Len()+1)
	for k := range sub.Clients {
		users[k] = sub.Clients[k].Name
		if users[k] == "" {
			users[k] = fmt.Sprintf("client-%d", keep[k])
		}
		n := sub.Clients[k].Len()
		if n == 0 {
			return nil, fmt.Errorf("client %d (%s) has no rows in the kept splits: a LEAF file cannot hold an empty user", keep[k], users[k])
		}
		start += n
		bounds[k+1] = start
		if sub.Clients[k].Name != "" {
			for j := bounds[k]; j < bounds[k+1]; j++ {
				if recs[j].Client != sub.Clients[k].Name {
					return nil, fmt.Errorf("row %d belongs to %q in the data, to client %q in the partition", rows[j], recs[j].Client, sub.Clients[k].Name)
				}
			}
		}
	}
	b, err := encodeLEAF(users, bounds, recs, classes)
	if err != nil {
		return nil, err
	}
	if err := fileio.Write(dataPath, b); err != nil {
		return nil, err
	}
	// Read it back as infer will.
	client := 0
	read := 0
	err = eachRecord([]string{"leaf:" + dataPath}, func(j int, rec *data.Record) error {
		if j >= len(recs) {
			return fmt.Errorf("%s: more than the %d records written", dataPath, len(recs))
		}
		for j >= bounds[client+1] {
			client++
		}
		if w := recs[j]; rec.Text != w.Text || rec.Label != w.Label || rec.Client != users[client] {
			return fmt.Errorf("%s: record %d reads back as %q → %d of %q, not %q → %d of %q", dataPath, j, rec.Text, rec.Label, rec.Client, w.Text, w.Label, users[client])
		}
		read++
		return nil
	})
	if err != nil {
		return nil, err
	}
	if read != len(recs) {
		return nil, fmt.Errorf("%s: %d records read back, %d written", dataPath, read, len(recs))
	}
	return sub, nil
}

// readLabels returns the labels of every record of specs and the class
// names.
func readLabels(specs []string) ([]int, []string, error) {
	var labels []int
	classes, err := eachRecordClasses(specs, func(_ int, rec *data.Record) error {
		labels = append(labels, rec.Label)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(classes) == 0 {
		return nil, nil, errors.New("the data names no classes")
	}
	return labels, classes, nil
}

func eachRecord(specs []string, fn func(i int, rec *data.Record) error) error {
	_, err := eachRecordClasses(specs, fn)
	return err
}

// eachRecordClasses calls fn with each record of specs, in order, and
// returns the class names.
func eachRecordClasses(specs []string, fn func(i int, rec *data.Record) error) ([]string, error) {
	if len(specs) == 0 {
		return nil, errors.New("no data specs")
	}
	var parts []data.Reader
	for _, s := range specs {
		r, err := data.Open(s)
		if err != nil {
			for _, p := range parts {
				p.Close()
			}
			return nil, err
		}
		parts = append(parts, r)
	}
	r := data.Concat(parts...)
	defer r.Close()
	var rec data.Record
	for i := 0; ; i++ {
		err := r.Next(&rec)
		if err == io.EOF {
			return r.Classes(), nil
		}
		if err != nil {
			return nil, err
		}
		if err := fn(i, &rec); err != nil {
			return nil, err
		}
	}
}

// encodeLEAF returns a LEAF JSON file of text records: users in order,
// user k holding recs[bounds[k]:bounds[k+1]], x the text and y the label's
// class name (the next letter).
func encodeLEAF(users []string, bounds []int, recs []data.Record, classes []string) ([]byte, error) {
	var b bytes.Buffer
	put := func(v any) error {
		j, err := json.Marshal(v)
		b.Write(j)
		return err
	}
	b.WriteString(`{"users":`)
	if err := put(users); err != nil {
		return nil, err
	}
	counts := make([]int, len(users))
	for k := range users {
		counts[k] = bounds[k+1] - bounds[k]
	}
	b.WriteString(",\n\"num_samples\":")
	put(counts)
	b.WriteString(",\n\"user_data\":{")
	for k, u := range users {
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
		put(u)
		xs := make([]string, 0, counts[k])
		ys := make([]string, 0, counts[k])
		for _, r := range recs[bounds[k]:bounds[k+1]] {
			if r.Label < 0 || r.Label >= len(classes) {
				return nil, fmt.Errorf("label %d outside the %d classes", r.Label, len(classes))
			}
			xs = append(xs, r.Text)
			ys = append(ys, classes[r.Label])
		}
		b.WriteString(`:{"x":`)
		if err := put(xs); err != nil {
			return nil, err
		}
		b.WriteString(`,"y":`)
		if err := put(ys); err != nil {
			return nil, err
		}
		b.WriteByte('}')
	}
	b.WriteString("\n}}\n")
	return b.Bytes(), nil
}
