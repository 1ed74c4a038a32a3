package federation

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/klauspost/compress/gzip"

	"github.com/fedcalib/fedcalib/internal/fileio"
)

// PartitionFormatV1 is the format tag of version 1 of the partition file.
const PartitionFormatV1 = "fedcalib.partition/v1"

// MaxExamples is the largest number of examples a partition holds: its
// example indices are int32.
const MaxExamples = math.MaxInt32

// Split names one of a client's local splits. The values match the split
// column of a logits file.
type Split uint8

// The three local splits of a client.
const (
	Train       Split = 0 // model training data; unused by post-hoc calibration
	Calibration Split = 1 // the data a client calibrates on
	Test        Split = 2 // held out; the global test set is the union over clients
)

// String returns "train", "calibration" or "test".
func (s Split) String() string {
	switch s {
	case Train:
		return "train"
	case Calibration:
		return "calibration"
	case Test:
		return "test"
	}
	return fmt.Sprintf("Split(%d)", uint8(s))
}

// Partition schemes, recorded in Partition.Scheme.
const (
	SchemeDirichlet = "dirichlet" // label skew, Dirichlet(β·1_K) per class
	SchemeIID       = "iid"       // uniform random dealing
	SchemeNatural   = "natural"   // the client column of the data
)

// Partition assigns each example of a data set to at most one client and,
// within the client, to one split. Every example appears exactly once: in
// one list of one client, or in Dropped. A Partition is only meaningful for
// the data it was made for; Data fingerprints that data and Check compares
// it.
type Partition struct {
	// Format is PartitionFormatV1.
	Format string `json:"format"`
	// Data fingerprints the data set the partition was made for.
	Data Fingerprint `json:"data"`
	// Scheme is SchemeDirichlet, SchemeIID or SchemeNatural.
	Scheme string `json:"scheme"`
	// Beta is the Dirichlet concentration β (SchemeDirichlet only).
	Beta float64 `json:"beta,omitempty"`
	// Seed is the seed every random choice of the partition came from.
	Seed uint64 `json:"seed"`
	// MinClientSize is the minimum client size the Dirichlet or IID
	// partition was drawn with (see PartitionOptions).
	MinClientSize int `json:"min_client_size,omitempty"`
	// MinSamples is the minimum number of examples of a kept user of a
	// natural partition (see NaturalOptions).
	MinSamples int `json:"min_samples,omitempty"`
	// Rule is how each client's data was split: "fractions",
	// "given" or "leaf-sample" (see SplitRule).
	Rule SplitRule `json:"rule"`
	// Fractions are the split fractions, recorded when Rule is
	// "fractions".
	Fractions *Fractions `json:"fractions,omitempty"`
	// Clients holds each client's examples; client k is Clients[k].
	Clients []Client `json:"clients"`
	// Dropped holds, in increasing order, the examples assigned to no
	// client (users below MinSamples); nil when there are none.
	Dropped []int32 `json:"dropped,omitempty"`
}

// Client is one client's share of a partition: indices of examples of the
// data set, each list in increasing order.
type Client struct {
	// ID is the client's id: its index for Dirichlet and IID partitions,
	// the value of the client column for natural ones.
	ID int64 `json:"id"`
	// Name is the client's name in the data set (a LEAF user, a speaker
	// role), when it has one.
	Name string `json:"name,omitempty"`
	// Train, Calibration and Test hold the client's examples in each split,
	// as int32: a partition takes 4 bytes per example (at most
	// MaxExamples).
	Train       []int32 `json:"train"`
	Calibration []int32 `json:"calibration"`
	Test        []int32 `json:"test"`
}

// Len returns the client's number of examples over all splits.
func (c *Client) Len() int { return len(c.Train) + len(c.Calibration) + len(c.Test) }

// Rows returns the client's examples in split s. It aliases the client.
func (c *Client) Rows(s Split) []int32 {
	switch s {
	case Train:
		return c.Train
	case Calibration:
		return c.Calibration
	case Test:
		return c.Test
	}
	panic(fmt.Sprintf("federation: unknown split %d", s))
}

// Fingerprint identifies a labelled data set well enough to refuse a
// partition made for different data.
type Fingerprint struct {
	// Examples is the number of examples N.
	Examples int `json:"examples"`
	// Classes is the number of classes C.
	Classes int `json:"classes"`
	// LabelsSHA256 is the hex SHA-256 of the labels written as
	// little-endian int64 values, in example order.
	LabelsSHA256 string `json:"labels_sha256"`
}

// NewFingerprint returns the fingerprint of a data set with the given
// labels and number of classes.
func NewFingerprint(labels []int, classes int) Fingerprint {
	h := sha256.New()
	var buf [8 * 512]byte
	for i := 0; i < len(labels); i += 512 {
		chunk := labels[i:min(i+512, len(labels))]
		for k, y := range chunk {
			binary.LittleEndian.PutUint64(buf[8*k:], uint64(int64(y)))
		}
		h.Write(buf[:8*len(chunk)])
	}
	return Fingerprint{Examples: len(labels), Classes: classes, LabelsSHA256: hex.EncodeToString(h.Sum(nil))}
}

// ErrMismatch is returned (wrapped) when a partition is applied to data it
// was not made for.
var ErrMismatch = errors.New("partition does not match the data")

// Check returns an error wrapping ErrMismatch unless p was made for a data
// set with these labels and classes.
func (p *Partition) Check(labels []int, classes int) error {
	got := NewFingerprint(labels, classes)
	switch {
	case got.Examples != p.Data.Examples:
		return fmt.Errorf("%w: it was made for %d examples, the data has %d; make a new partition for this data", ErrMismatch, p.Data.Examples, got.Examples)
	case got.Classes != p.Data.Classes:
		return fmt.Errorf("%w: it was made for %d classes, the data has %d; make a new partition for this data", ErrMismatch, p.Data.Classes, got.Classes)
	case got.LabelsSHA256 != p.Data.LabelsSHA256:
		return fmt.Errorf("%w: same size but different labels (labels_sha256 %.12s…, data %.12s…); make a new partition for this data", ErrMismatch, p.Data.LabelsSHA256, got.LabelsSHA256)
	}
	return nil
}

// Len returns the number of clients K.
func (p *Partition) Len() int { return len(p.Clients) }

// Rows returns the examples of split s over all clients, in increasing
// order. Rows(Test) is the global test set.
func (p *Partition) Rows(s Split) []int {
	var n int
	for i := range p.Clients {
		n += len(p.Clients[i].Rows(s))
	}
	out := make([]int, 0, n)
	for i := range p.Clients {
		for _, r := range p.Clients[i].Rows(s) {
			out = append(out, int(r))
		}
	}
	slices.Sort(out)
	return out
}

// Columns returns the partition as per-example client and split columns,
// as a logits file stores them: client[i] is the index (not the ID) of the
// client holding example i, or -1 for a dropped example, whose split is 0.
func (p *Partition) Columns() (client []int32, split []uint8) {
	client = make([]int32, p.Data.Examples)
	split = make([]uint8, p.Data.Examples)
	for _, i := range p.Dropped {
		client[i] = -1
	}
	for k := range p.Clients {
		for _, s := range []Split{Train, Calibration, Test} {
			for _, i := range p.Clients[k].Rows(s) {
				client[i] = int32(k)
				split[i] = uint8(s)
			}
		}
	}
	return client, split
}

// LabelSkew returns the mean over clients of the total-variation distance
// between a client's label distribution (over all its splits) and the
// label distribution of all assigned examples: 0 for identical
// distributions, approaching 1 for disjoint ones. labels must be the data
// the partition was made for.
func (p *Partition) LabelSkew(labels []int) float64 {
	c := p.Data.Classes
	global := make([]float64, c)
	local := make([]float64, c)
	var total float64
	for k := range p.Clients {
		for _, s := range []Split{Train, Calibration, Test} {
			for _, i := range p.Clients[k].Rows(s) {
				global[labels[i]]++
				total++
			}
		}
	}
	if total == 0 || len(p.Clients) == 0 {
		return 0
	}
	for j := range global {
		global[j] /= total
	}
	var sum float64
	for k := range p.Clients {
		clear(local)
		n := float64(p.Clients[k].Len())
		for _, s := range []Split{Train, Calibration, Test} {
			for _, i := range p.Clients[k].Rows(s) {
				local[labels[i]]++
			}
		}
		var tv float64
		for j := range local {
			d := global[j]
			if n > 0 {
				d -= local[j] / n
			}
			if d < 0 {
				d = -d
			}
			tv += d
		}
		sum += tv / 2
	}
	return sum / float64(len(p.Clients))
}

// Validate reports the first structural problem of p: a wrong format tag,
// an unknown scheme or rule, no clients, an index outside [0, N), or an
// example assigned twice or not at all.
func (p *Partition) Validate() error {
	switch {
	case p.Format != PartitionFormatV1:
		return fmt.Errorf("unsupported partition format %q: this fedcalib reads %q; upgrade fedcalib or make a new partition", p.Format, PartitionFormatV1)
	case p.Data.Examples < 0:
		return fmt.Errorf("data.examples is %d: must be non-negative", p.Data.Examples)
	case p.Data.Classes < 2:
		return fmt.Errorf("data.classes is %d: need at least 2", p.Data.Classes)
	case len(p.Data.LabelsSHA256) != 2*sha256.Size:
		return fmt.Errorf("data.labels_sha256 %q is not a hex SHA-256", p.Data.LabelsSHA256)
	case len(p.Clients) == 0:
		return errors.New("clients: the partition has no clients")
	}
	switch p.Scheme {
	case SchemeDirichlet:
		if !(p.Beta > 0) {
			return fmt.Errorf("beta is %v: a Dirichlet partition needs β > 0", p.Beta)
		}
	case SchemeIID, SchemeNatural:
	default:
		return fmt.Errorf("scheme %q: want %q, %q or %q", p.Scheme, SchemeDirichlet, SchemeIID, SchemeNatural)
	}
	switch p.Rule {
	case RuleFractions:
		if p.Fractions == nil {
			return errors.New("rule \"fractions\" needs \"fractions\"")
		}
		if err := p.Fractions.validate(); err != nil {
			return err
		}
	case RuleGiven, RuleLEAFSample:
	default:
		return fmt.Errorf("rule %q: want %q, %q or %q", p.Rule, RuleFractions, RuleGiven, RuleLEAFSample)
	}
	n := p.Data.Examples
	listed := len(p.Dropped)
	for k := range p.Clients {
		listed += p.Clients[k].Len()
	}
	if listed != n {
		return fmt.Errorf("the partition lists %d examples, data.examples is %d: every example must be assigned exactly once", listed, n)
	}
	seen := make([]bool, n)
	mark := func(where string, idx []int32) error {
		for _, i := range idx {
			if i < 0 || int(i) >= n {
				return fmt.Errorf("%s: example %d is outside [0, %d)", where, i, n)
			}
			if seen[i] {
				return fmt.Errorf("%s: example %d is assigned twice", where, i)
			}
			seen[i] = true
		}
		return nil
	}
	for k := range p.Clients {
		c := &p.Clients[k]
		for _, s := range []Split{Train, Calibration, Test} {
			if err := mark(fmt.Sprintf("clients[%d].%s", k, s), c.Rows(s)); err != nil {
				return err
			}
		}
	}
	// N in-range indices without repeats cover [0, N) exactly.
	return mark("dropped", p.Dropped)
}

// Encode writes p to w as JSON: indented, with each client (and the
// dropped examples) on one line, so that a file of many examples stays
// readable and compact.
func (p *Partition) Encode(w io.Writer) error {
	head := *p
	head.Clients, head.Dropped = nil, nil
	b, err := json.MarshalIndent(&head, "", " ")
	if err != nil {
		return err
	}
	// Replace the closing `"clients": null` and brace with the clients.
	i := bytes.LastIndex(b, []byte(`"clients": null`))
	if i < 0 {
		return errors.New("federation: unexpected partition encoding")
	}
	var buf bytes.Buffer
	buf.Write(b[:i])
	buf.WriteString("\"clients\": [")
	for k := range p.Clients {
		c, err := json.Marshal(&p.Clients[k])
		if err != nil {
			return err
		}
		if k > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n  ")
		buf.Write(c)
	}
	buf.WriteString("\n ]")
	if p.Dropped != nil {
		d, err := json.Marshal(p.Dropped)
		if err != nil {
			return err
		}
		buf.WriteString(",\n \"dropped\": ")
		buf.Write(d)
	}
	buf.WriteString("\n}\n")
	_, err = w.Write(buf.Bytes())
	return err
}

// DecodePartition reads a partition from r and validates it. It refuses
// unknown format versions and unknown fields.
func DecodePartition(r io.Reader) (*Partition, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	p := new(Partition)
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("not a partition file: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// MaxPartitionBytes is the largest partition file, once decompressed,
// that ReadPartition reads: 1 GiB, some 10^8 rows.
const MaxPartitionBytes = 1 << 30

// ReadPartition reads and validates the partition file at path, which may
// be gzip-compressed (as the model zoo's partition files are). It refuses
// a path that is not a regular file (/dev/zero, a FIFO) and a file of
// more than MaxPartitionBytes, compressed or once decompressed, stopping
// a gzip bomb there.
func ReadPartition(path string) (*Partition, error) {
	b, err := fileio.ReadLimited(path, MaxPartitionBytes)
	if err != nil {
		return nil, err
	}
	var r io.Reader = bytes.NewReader(b)
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = &limitedReader{r: zr, left: MaxPartitionBytes}
	}
	p, err := DecodePartition(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// limitedReader reads r and fails with fileio.ErrTooLarge past left
// bytes (io.LimitReader would end quietly, leaving a truncated JSON).
type limitedReader struct {
	r    io.Reader
	left int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, fmt.Errorf("decompressed, it is %w: more than %d bytes", fileio.ErrTooLarge, MaxPartitionBytes)
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// WritePartition writes p to path atomically: to a temporary file in the
// same directory, then renamed.
func WritePartition(path string, p *Partition) error {
	var buf bytes.Buffer
	if err := p.Encode(&buf); err != nil {
		return err
	}
	return fileio.Write(path, buf.Bytes())
}
