package logits

import (
	"archive/zip"
	"strings"
)

// Labels is the labelled part of a data set, without its logits: what a
// partition is made from. The zero value is an empty set with no classes.
type Labels struct {
	// Labels holds the class of each row, in [0, Classes).
	Labels []int
	// Classes is the number of classes C.
	Classes int
	// Client holds each row's client id; nil when the data has none.
	Client []int32
	// Split holds each row's split (SplitTrain, SplitCalibration,
	// SplitTest); nil when the data has none.
	Split []uint8
	// Names holds the client names by id; nil when the ids are numbers.
	Names []string
}

// IsFile reports whether path looks like a logits file: a .npz archive
// holding a "logits" array. It reads only the archive's directory, so a
// caller can tell a logits file from a dataset specification cheaply; a
// file it accepts may still fail Read.
func IsFile(path string) bool {
	if !strings.HasSuffix(strings.ToLower(path), ".npz") {
		return false
	}
	z, err := zip.OpenReader(path)
	if err != nil {
		return false
	}
	defer z.Close()
	for _, f := range z.File {
		if f.Name == "logits.npy" || f.Name == "logits" {
			return true
		}
	}
	return false
}

// ReadLabels reads the labels, client ids and split column of the logits
// file at path. It validates the file as Read does, within
// DefaultMemoryBudget: see ReadLabelsBudget.
func ReadLabels(path string) (*Labels, error) { return ReadLabelsBudget(path, 0) }

// ReadLabelsBudget is ReadLabels within a memory budget of budget bytes
// (see ReadBudget).
func ReadLabelsBudget(path string, budget int64) (*Labels, error) {
	f, err := ReadBudget(path, budget)
	if err != nil {
		return nil, err
	}
	l := &Labels{Labels: make([]int, f.Len()), Classes: f.Classes, Client: f.Client, Split: f.Split}
	for i, y := range f.Labels {
		l.Labels[i] = int(y)
	}
	return l, nil
}
