package experiment

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

// Row is the result of one run: its parameters and what it measured on the
// global test split (every client's test rows). Every field is
// deterministic for a configuration and its inputs.
type Row struct {
	// ID identifies the cell: a hash of its parameters and input files.
	ID string
	// Cell holds the run's parameters, with Beta and SampleRate those
	// actually used.
	Cell
	// Clients is the number of clients K; TestRows the size of the
	// global test split.
	Clients, TestRows int
	// After holds the metrics of the calibrated model on the test
	// split, Base those of the uncalibrated model.
	After, Base calib.Metrics
	// AccuracyDrop flags a test accuracy more than 1 percentage point
	// below the base model's (the paper's asterisk).
	AccuracyDrop bool
	// EpsilonSpent and Sigma are the ε the run spent and its noise
	// standard deviation, both 0 without privacy.
	EpsilonSpent, Sigma float64
	// Participants is the number of client participations over all
	// rounds.
	Participants int
	// BytesSent and BytesReceived are what one participating client
	// sends to and receives from the server in one round.
	BytesSent, BytesReceived int
}

// metric returns the named metric (see Metrics) of r.
func (r *Row) metric(name string) float64 {
	switch name {
	case "cwece":
		return r.After.CWECE
	case "ece":
		return r.After.ECE
	case "accuracy":
		return r.After.Accuracy
	case "nll":
		return r.After.NLL
	case "brier":
		return r.After.Brier
	case "bytes_sent":
		return float64(r.BytesSent)
	case "bytes_received":
		return float64(r.BytesReceived)
	case "participants":
		return float64(r.Participants)
	case "epsilon_spent":
		return r.EpsilonSpent
	case "sigma":
		return r.Sigma
	}
	panic("experiment: unknown metric " + name)
}

// baseMetric returns the base model's value of a calibration metric, and
// false for metrics the base model has none of.
func (r *Row) baseMetric(name string) (float64, bool) {
	switch name {
	case "cwece":
		return r.Base.CWECE, true
	case "ece":
		return r.Base.ECE, true
	case "accuracy":
		return r.Base.Accuracy, true
	case "nll":
		return r.Base.NLL, true
	case "brier":
		return r.Base.Brier, true
	}
	return 0, false
}

// accuracyDropped reports calib.AccuracyDropped(before, after): a test
// accuracy more than 1 percentage point below the base model's, the
// paper's asterisk.
func accuracyDropped(after, before calib.Metrics) bool {
	return calib.AccuracyDropped(before, after)
}

// Timing holds what a run measured of time; it varies between runs.
type Timing struct {
	// ID identifies the cell, as in Row.
	ID string
	// ComputeTotal is the participants' local compute time summed over
	// all rounds; ComputeMin and ComputeMax the shortest and longest
	// single participation.
	ComputeTotal, ComputeMin, ComputeMax time.Duration
	// Participants is the number of participations ComputeTotal sums.
	Participants int
	// Wall is the wall time of the run: the fit and the evaluation.
	Wall time.Duration
}

// ComputeMean returns the mean compute time of a client in a round, 0
// when no client took part.
func (t *Timing) ComputeMean() time.Duration {
	if t.Participants == 0 {
		return 0
	}
	return t.ComputeTotal / time.Duration(t.Participants)
}

// runsHeader is the header of runs.csv.
var runsHeader = []string{
	"cell", "dataset", "method", "weighting", "rounds", "beta", "epsilon", "delta", "mexp", "clip", "clip_pos", "clip_neg",
	"dp_alpha_z", "clients_per_round", "sample_rate", "server_lr", "accountant", "seed",
	"clients", "test_rows",
	"cwece", "ece", "accuracy", "nll", "brier",
	"base_cwece", "base_ece", "base_accuracy", "base_nll", "base_brier",
	"accuracy_drop", "epsilon_spent", "sigma", "participants", "bytes_sent", "bytes_received",
}

// timingsHeader is the header of timings.csv.
var timingsHeader = []string{
	"cell", "dataset", "method", "weighting", "rounds", "seed",
	"participants", "compute_mean_s", "compute_min_s", "compute_max_s", "compute_total_s", "wall_s",
}

func (r *Row) record() []string {
	rec := []string{r.ID, r.Dataset}
	for _, p := range Params() {
		rec = append(rec, r.param(p))
	}
	f, i := formatFloat, strconv.Itoa
	opt := func(v float64) string {
		if v == 0 {
			return ""
		}
		return f(v)
	}
	drop := "0"
	if r.AccuracyDrop {
		drop = "1"
	}
	return append(rec,
		i(r.Clients), i(r.TestRows),
		f(r.After.CWECE), f(r.After.ECE), f(r.After.Accuracy), f(r.After.NLL), f(r.After.Brier),
		f(r.Base.CWECE), f(r.Base.ECE), f(r.Base.Accuracy), f(r.Base.NLL), f(r.Base.Brier),
		drop, opt(r.EpsilonSpent), opt(r.Sigma), i(r.Participants), i(r.BytesSent), i(r.BytesReceived))
}

func (t *Timing) record(r *Row) []string {
	sec := func(d time.Duration) string { return formatFloat(d.Seconds()) }
	return []string{
		t.ID, r.Dataset, r.Method, string(r.Weighting), strconv.Itoa(r.Rounds), strconv.FormatUint(r.Seed, 10),
		strconv.Itoa(t.Participants), sec(t.ComputeMean()), sec(t.ComputeMin), sec(t.ComputeMax), sec(t.ComputeTotal), sec(t.Wall),
	}
}

// EncodeRuns writes rows as runs.csv.
func EncodeRuns(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	cw.Write(runsHeader)
	for i := range rows {
		cw.Write(rows[i].record())
	}
	cw.Flush()
	return cw.Error()
}

// encodeTimings writes the timings of rows (those in times) as
// timings.csv, in the order of rows.
func encodeTimings(w io.Writer, rows []Row, times map[string]Timing) error {
	cw := csv.NewWriter(w)
	cw.Write(timingsHeader)
	for i := range rows {
		if t, ok := times[rows[i].ID]; ok {
			cw.Write(t.record(&rows[i]))
		}
	}
	cw.Flush()
	return cw.Error()
}

// ErrFormat is returned (wrapped) for a runs.csv or timings.csv written
// by another version of this package or damaged.
var ErrFormat = errors.New("not a runs file of this fedcalib version")

// DecodeRuns reads rows written by EncodeRuns.
func DecodeRuns(r io.Reader) ([]Row, error) {
	recs, err := readCSV(r, runsHeader)
	if err != nil {
		return nil, err
	}
	rows := make([]Row, 0, len(recs))
	for n, rec := range recs {
		row, err := parseRow(rec)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrFormat, n+2, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func readCSV(r io.Reader, header []string) ([][]string, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = len(header)
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if len(recs) == 0 || !slices.Equal(recs[0], header) {
		return nil, fmt.Errorf("%w: its header is not %s", ErrFormat, strings.Join(header, ","))
	}
	return recs[1:], nil
}

// fieldParser parses the fields of one record in order, keeping the
// first error.
type fieldParser struct {
	rec []string
	i   int
	err error
}

func (p *fieldParser) next() (name, s string) {
	name, s = runsHeader[p.i], p.rec[p.i]
	p.i++
	return name, s
}

func (p *fieldParser) str() string { _, s := p.next(); return s }

func (p *fieldParser) float() float64 {
	name, s := p.next()
	if s == "" || p.err != nil {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		p.err = fmt.Errorf("%s: %q is not a number", name, s)
	}
	return v
}

func (p *fieldParser) int() int {
	name, s := p.next()
	if s == "" || p.err != nil {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		p.err = fmt.Errorf("%s: %q is not an integer", name, s)
	}
	return v
}

func (p *fieldParser) uint() uint64 {
	name, s := p.next()
	if p.err != nil {
		return 0
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		p.err = fmt.Errorf("%s: %q is not a seed", name, s)
	}
	return v
}

func parseRow(rec []string) (Row, error) {
	p := &fieldParser{rec: rec}
	var r Row
	r.ID = p.str()
	r.Dataset = p.str()
	r.Method = p.str()
	r.Weighting = calib.Weighting(p.str())
	r.Rounds = p.int()
	r.Beta, r.Epsilon, r.Delta = p.float(), p.float(), p.float()
	r.Mexp = p.int()
	r.Clip, r.ClipPos, r.ClipNeg, r.AlphaZ = p.float(), p.float(), p.float(), p.float()
	r.ClientsPerRound = p.int()
	r.SampleRate, r.ServerLR = p.float(), p.float()
	r.Accountant = p.str()
	r.Seed = p.uint()
	r.Clients, r.TestRows = p.int(), p.int()
	r.After = calib.Metrics{N: r.TestRows, CWECE: p.float(), ECE: p.float(), Accuracy: p.float(), NLL: p.float(), Brier: p.float()}
	r.Base = calib.Metrics{N: r.TestRows, CWECE: p.float(), ECE: p.float(), Accuracy: p.float(), NLL: p.float(), Brier: p.float()}
	switch drop := p.str(); drop {
	case "0", "1":
		r.AccuracyDrop = drop == "1"
	default:
		if p.err == nil {
			p.err = fmt.Errorf("accuracy_drop: %q is not 0 or 1", drop)
		}
	}
	r.EpsilonSpent, r.Sigma = p.float(), p.float()
	r.Participants, r.BytesSent, r.BytesReceived = p.int(), p.int(), p.int()
	if p.err == nil && (len(r.ID) != 16 || r.Rounds < 1) {
		p.err = fmt.Errorf("cell %q or rounds %d is malformed", r.ID, r.Rounds)
	}
	return r, p.err
}

// decodeTimings reads timings.csv into a map by cell.
func decodeTimings(r io.Reader) (map[string]Timing, error) {
	recs, err := readCSV(r, timingsHeader)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Timing, len(recs))
	for n, rec := range recs {
		var vals [6]float64
		for k := range vals {
			v, err := strconv.ParseFloat(rec[6+k], 64)
			if err != nil {
				return nil, fmt.Errorf("%w: line %d: %s: %q is not a number", ErrFormat, n+2, timingsHeader[6+k], rec[6+k])
			}
			vals[k] = v
		}
		// Rounded, not truncated, so that a time read back writes the
		// same text.
		d := func(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
		out[rec[0]] = Timing{
			ID: rec[0], Participants: int(vals[0]),
			ComputeMin: d(vals[2]), ComputeMax: d(vals[3]), ComputeTotal: d(vals[4]), Wall: d(vals[5]),
		}
	}
	return out, nil
}

// previous is what an earlier run left in the output directory: the rows
// of runs.csv in file order, each with its bytes as they are in the file
// (so that a row a run does not run is written back byte for byte), and
// the timings of timings.csv by cell, parsed and as their bytes.
type previous struct {
	rows     []Row
	raw      [][]byte // raw[i]: the record of rows[i], its line ending included
	times    map[string]Timing
	rawTimes map[string][]byte
}

// readPrevious reads the runs.csv and timings.csv of an earlier run;
// missing files are no error.
func readPrevious(runsPath, timingsPath string) (*previous, error) {
	p := &previous{times: map[string]Timing{}, rawTimes: map[string][]byte{}}
	b, err := readSmall(runsPath)
	if err == nil {
		recs, raw, err := readCSVRaw(b, runsHeader)
		if err == nil {
			p.raw = raw
			for n, rec := range recs {
				row, perr := parseRow(rec)
				if perr != nil {
					err = fmt.Errorf("%w: line %d: %v", ErrFormat, n+2, perr)
					break
				}
				p.rows = append(p.rows, row)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w; delete it to start afresh, or choose another --out", runsPath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if b, err := readSmall(timingsPath); err == nil {
		ts, err := decodeTimings(bytes.NewReader(b))
		if err == nil {
			var raw [][]byte
			var recs [][]string
			if recs, raw, err = readCSVRaw(b, timingsHeader); err == nil {
				for i, rec := range recs {
					p.rawTimes[rec[0]] = raw[i]
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w; delete it to start afresh, or choose another --out", timingsPath, err)
		}
		p.times = ts
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return p, nil
}

// maxResultsFile is the largest runs.csv or timings.csv read back: far
// above any grid's (a row is about 400 bytes, and a grid holds at most
// MaxCells cells), and a bound on what a damaged or hostile file can make
// Run allocate.
const maxResultsFile = 1 << 30

// readSmall reads the file at path, refusing one that is not a regular
// file or is larger than maxResultsFile.
func readSmall(path string) ([]byte, error) {
	return fileio.ReadLimited(path, maxResultsFile)
}

// readCSVRaw reads the CSV records of b after its header, which must be
// header, and the bytes of each record as they are in b.
func readCSVRaw(b []byte, header []string) ([][]string, [][]byte, error) {
	cr := csv.NewReader(bytes.NewReader(b))
	cr.FieldsPerRecord = len(header)
	cr.ReuseRecord = false
	var recs [][]string
	var raw [][]byte
	first := true
	for {
		start := cr.InputOffset()
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		if first {
			if !slices.Equal(rec, header) {
				return nil, nil, fmt.Errorf("%w: its header is not %s", ErrFormat, strings.Join(header, ","))
			}
			first = false
			continue
		}
		line := b[start:cr.InputOffset()]
		if len(line) == 0 || line[len(line)-1] != '\n' {
			line = append(slices.Clip(line), '\n') // a last line without its newline
		}
		recs = append(recs, rec)
		raw = append(raw, line)
	}
	if first {
		return nil, nil, fmt.Errorf("%w: its header is not %s", ErrFormat, strings.Join(header, ","))
	}
	return recs, raw, nil
}

// encodeRecord returns rec as one CSV line.
func encodeRecord(rec []string) []byte {
	var b bytes.Buffer
	cw := csv.NewWriter(&b)
	cw.Write(rec)
	cw.Flush()
	return b.Bytes()
}
