package infer

import (
	"fmt"
	"io"

	"github.com/fedcalib/fedcalib/infer/data"
	"github.com/fedcalib/fedcalib/infer/logits"
)

// ReadLabels reads the labels of a logits file (see logits.IsFile) or of
// a dataset specification (see data.Open), without running any model:
// the labels, the number of classes, and the client of each row when the
// data names one. Clients named by a dataset are numbered in order of
// first appearance, as Session.Infer numbers them, so a partition made
// from a dataset's labels fits the logits that infer writes for it.
func ReadLabels(pathOrSpec string) (*logits.Labels, error) {
	return ReadLabelsBudget(pathOrSpec, 0)
}

// ReadLabelsBudget is ReadLabels reading a logits file within a memory
// budget of budget bytes (logits.ReadBudget; ≤ 0: the default).
func ReadLabelsBudget(pathOrSpec string, budget int64) (*logits.Labels, error) {
	if logits.IsFile(pathOrSpec) {
		return logits.ReadLabelsBudget(pathOrSpec, budget)
	}
	rd, err := data.Open(pathOrSpec)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	l := &logits.Labels{}
	ids := map[string]int32{}
	var rec data.Record
	for {
		err := rd.Next(&rec)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		l.Labels = append(l.Labels, rec.Label)
		if rec.Client != "" {
			l.Client = append(l.Client, clientID(ids, &l.Names, rec.Client))
		}
	}
	if len(l.Labels) == 0 {
		return nil, fmt.Errorf("%s: no examples", pathOrSpec)
	}
	if l.Client != nil && len(l.Client) != len(l.Labels) {
		return nil, fmt.Errorf("%s: only %d of %d records name a client", pathOrSpec, len(l.Client), len(l.Labels))
	}
	l.Classes = len(rd.Classes())
	if l.Classes == 0 {
		for _, y := range l.Labels {
			l.Classes = max(l.Classes, y+1)
		}
	}
	return l, nil
}
