package federation

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/fedcalib/fedcalib/calib"
)

// RowSource is a labelled data set read one row at a time, such as the
// float32 block of a logits file (infer/logits.File implements it). A
// RowPopulation converts the rows of a client to a calib.Set only when
// the client is asked for, so the data is never held twice.
type RowSource interface {
	// Len returns the number of rows N.
	Len() int
	// NumClasses returns the number of classes C ≥ 2.
	NumClasses() int
	// Label returns the class of row i ∈ [0, N).
	Label(i int) int
	// Row writes the C logits of row i ∈ [0, N) into dst[:C]. It is
	// called concurrently for distinct dst.
	Row(dst []float64, i int)
}

// RowPopulation is a Population read from a RowSource: client k's data
// is split Split of client k of a Partition, converted from the source
// each time the client is asked for. It holds the partition and the
// class counts, nothing per example. The zero value is not usable:
// create one with NewRowPopulation.
type RowPopulation struct {
	src     RowSource
	part    *Partition
	split   Split
	classes int
	counts  []float64
}

// NewRowPopulation returns the population whose client k holds the rows
// of src in split s of client k of p, after checking, in one pass over
// the labels, that p was made for src (an error wrapping ErrMismatch
// otherwise) and that every label lies in [0, C).
func NewRowPopulation(src RowSource, p *Partition, s Split) (*RowPopulation, error) {
	if s > Test {
		return nil, fmt.Errorf("unknown split %d", s)
	}
	n, c := src.Len(), src.NumClasses()
	if c < 2 {
		return nil, fmt.Errorf("need at least 2 classes, have %d", c)
	}
	fp, err := rowFingerprint(src)
	if err != nil {
		return nil, err
	}
	if err := p.matches(fp); err != nil {
		return nil, err
	}
	counts := make([]float64, c)
	for k := range p.Clients {
		for _, i := range p.Clients[k].Rows(s) {
			if i < 0 || int(i) >= n {
				return nil, fmt.Errorf("client %d: row %d outside the data's %d rows", k, i, n)
			}
			counts[src.Label(int(i))]++
		}
	}
	return &RowPopulation{src: src, part: p, split: s, classes: c, counts: counts}, nil
}

// Len returns the number of clients of the partition.
func (rp *RowPopulation) Len() int { return rp.part.Len() }

// Classes returns the number of classes of the source.
func (rp *RowPopulation) Classes() int { return rp.classes }

// Client returns client k's rows, converted into a new set.
func (rp *RowPopulation) Client(k int) (*calib.Set, error) {
	return RowSet(rp.src, rp.part.Clients[k].Rows(rp.split)), nil
}

// RowSet returns the given rows of src, in that order, converted into a
// new set. It panics if a row is out of range.
func RowSet[I int | int32](src RowSource, rows []I) *calib.Set {
	c := src.NumClasses()
	s := &calib.Set{
		Logits:  make([]float64, len(rows)*c),
		Labels:  make([]int, len(rows)),
		Classes: c,
	}
	for r, i := range rows {
		src.Row(s.Logits[r*c:(r+1)*c], int(i))
		s.Labels[r] = src.Label(int(i))
	}
	return s
}

// ClassCounts returns the number of examples of each class over all
// clients.
func (rp *RowPopulation) ClassCounts() []float64 { return append([]float64(nil), rp.counts...) }

// rowFingerprint returns the Fingerprint of src's labels (as
// NewFingerprint computes it) without copying them, or an error for a
// label outside [0, C).
func rowFingerprint(src RowSource) (Fingerprint, error) {
	n, c := src.Len(), src.NumClasses()
	h := sha256.New()
	var buf [8 * 512]byte
	for i := 0; i < n; i += 512 {
		m := min(512, n-i)
		for k := range m {
			y := src.Label(i + k)
			if y < 0 || y >= c {
				return Fingerprint{}, fmt.Errorf("label of row %d is %d, outside [0, %d)", i+k, y, c)
			}
			binary.LittleEndian.PutUint64(buf[8*k:], uint64(int64(y)))
		}
		h.Write(buf[:8*m])
	}
	return Fingerprint{Examples: n, Classes: c, LabelsSHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// matches reports, as Check does, whether p was made for data with
// fingerprint fp.
func (p *Partition) matches(fp Fingerprint) error {
	switch {
	case fp.Examples != p.Data.Examples:
		return fmt.Errorf("%w: it was made for %d examples, the data has %d; make a new partition for this data", ErrMismatch, p.Data.Examples, fp.Examples)
	case fp.Classes != p.Data.Classes:
		return fmt.Errorf("%w: it was made for %d classes, the data has %d; make a new partition for this data", ErrMismatch, p.Data.Classes, fp.Classes)
	case fp.LabelsSHA256 != p.Data.LabelsSHA256:
		return fmt.Errorf("%w: same size but different labels (labels_sha256 %.12s…, data %.12s…); make a new partition for this data", ErrMismatch, p.Data.LabelsSHA256, fp.LabelsSHA256)
	}
	return nil
}
