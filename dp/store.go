package dp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/fedcalib/fedcalib/internal/fileio"
	"github.com/fedcalib/fedcalib/internal/strictjson"
)

// A privacy ledger file accumulates the privacy spent on each dataset
// across runs, so that repeated fits on the same people cannot together
// exceed a budget that each respects alone. It is JSON:
//
//	{
//	  "format": "fedcalib.ledger/v1",
//	  "datasets": {
//	    "<key>": {
//	      "description": "cifar10.npz: 10000 examples, 10 classes",
//	      "accountant": "zcdp",
//	      "delta": 1e-05,
//	      "epsilon": 1.43,
//	      "rho": 0.0611,
//	      "rdp_orders": [1.1, …], "rdp": [0.0012, …],
//	      "runs": [
//	        {"time": "2026-05-01T10:00:00Z", "method": "temp", "calibrator": "a.json",
//	         "epsilon": 1, "rho": 0.0306, "noise_multiplier": 14.01, "rounds": 12, "sample_rate": 0.1}
//	      ]
//	    }
//	  }
//	}
//
// The key identifies the dataset (fedcalib uses the hex SHA-256 of its
// labels, the fingerprint partitions carry). Every dataset is accounted
// under one accountant at one δ. The composed state is ρ, the sum of the
// runs' ρ (the zcdp accounting; for reference under rdp), and under rdp
// the RDP curve rdp over rdp_orders (DefaultOrders), the sum of the runs'
// curves; epsilon is the ε the composed state spends at δ. Each run
// records its own spend and the release that made it: rounds rounds, each
// one Poisson-subsampled Gaussian mechanism of noise_multiplier (the
// mechanisms of a round combined, Release.NoiseMultiplier) at
// sample_rate. A private federated evaluation is a run too, of kind
// "evaluation" (KindEvaluation; fits have no kind), and spends from the
// same budget. Readers recompute the composed state from the runs and
// refuse a file whose state disagrees (to 1e-9, relative), so an edited
// ledger cannot hide a spend.
//
// Reserve and Commit update a ledger file atomically (a temporary file
// renamed over it) while holding an exclusive lock (flock(2)) on a lock
// file next to it, path+".lock", from the budget check to the write: of
// two runs that would each fit in what is left of a budget, the second
// waits for the first and then sees its spend. Both act on the file the
// path resolves to (fileio.Resolve): a ledger reached through a symbolic
// link is updated where the link points, the link left in place, and
// runs reaching one ledger by different paths take turns on one lock. A
// ledger with several hard links is refused, since the rename would
// update one of them only. The lock file lasts as long as the lock: its
// holder removes it before letting go. A process that dies holding the
// lock releases it (the kernel drops flock locks on exit; only SIGKILL
// leaves the empty lock file, which the next run takes over), and leaves
// the ledger as it was before its run.

// LedgerFormatV1 is the format tag of version 1 of the privacy ledger
// file.
const LedgerFormatV1 = "fedcalib.ledger/v1"

// ledgerTolerance is the relative tolerance within which a ledger file's
// composed state must equal the one its runs give. It absorbs rounding
// only: the file's numbers are written in full precision.
const ledgerTolerance = 1e-9

// LedgerFile is a privacy ledger file. The zero value is an empty ledger.
type LedgerFile struct {
	// Format is LedgerFormatV1.
	Format string `json:"format"`
	// Datasets holds the spend on each dataset, by key.
	Datasets map[string]*DatasetSpend `json:"datasets"`
}

// DatasetSpend is the privacy spent on one dataset over its runs.
type DatasetSpend struct {
	// Description says what the dataset is, for people; it is not
	// checked.
	Description string `json:"description,omitempty"`
	// Accountant is "zcdp" or "rdp"; every run on the dataset uses it.
	Accountant string `json:"accountant"`
	// Delta is the δ at which every run on the dataset is accounted.
	Delta float64 `json:"delta"`
	// Epsilon is the ε the composed state spends at Delta.
	Epsilon float64 `json:"epsilon"`
	// Rho is the sum of the runs' zCDP ρ: the composed state under
	// zcdp, for reference under rdp.
	Rho float64 `json:"rho"`
	// RDPOrders and RDP are, under rdp, the composed RDP curve: the sum
	// of the runs' curves at DefaultOrders. Both are nil under zcdp.
	RDPOrders []float64 `json:"rdp_orders,omitempty"`
	RDP       []float64 `json:"rdp,omitempty"`
	// Runs lists the runs in the order they were recorded.
	Runs []LedgerRun `json:"runs"`
}

// LedgerRun is one run recorded in a ledger file.
type LedgerRun struct {
	// Time is when the run was recorded.
	Time time.Time `json:"time"`
	// Kind is what the run released: empty for a calibrator fit,
	// KindEvaluation for a federated evaluation's noisy statistics.
	Kind string `json:"kind,omitempty"`
	// Method is the calibrator method of the run: of the calibrator
	// fitted, or evaluated ("base" for the base model).
	Method string `json:"method"`
	// Calibrator is the path of the calibrator file the run wrote or,
	// for an evaluation, the one it evaluated (empty for the base
	// model).
	Calibrator string `json:"calibrator"`
	// Epsilon and Rho are what the run alone spent, at the dataset's δ.
	Epsilon float64 `json:"epsilon"`
	Rho     float64 `json:"rho"`
	// NoiseMultiplier is the effective noise multiplier of one round
	// (Release.NoiseMultiplier), Rounds the number of rounds and
	// SampleRate the Poisson sampling rate of the release.
	NoiseMultiplier float64 `json:"noise_multiplier"`
	Rounds          int     `json:"rounds"`
	SampleRate      float64 `json:"sample_rate"`
}

// spend is a composed privacy state: ρ, and under rdp the curve over
// DefaultOrders.
type spend struct {
	rho float64
	rdp []float64
}

// released returns the spend of rounds rounds of the Poisson-subsampled
// Gaussian mechanism with multiplier z at rate q under acc.
func released(acc Accountant, z float64, rounds int, q float64) spend {
	s := spend{rho: float64(rounds) * GaussianRho(z)}
	if acc == RDP {
		orders := DefaultOrders()
		s.rdp = make([]float64, len(orders))
		for i, a := range orders {
			s.rdp[i] = float64(rounds) * poissonGaussianRDP(q, z, a)
		}
	}
	return s
}

// plus returns the composition of s and t: ρ and RDP curves add.
func (s spend) plus(t spend) spend {
	out := spend{rho: s.rho + t.rho}
	if s.rdp != nil || t.rdp != nil {
		out.rdp = make([]float64, max(len(s.rdp), len(t.rdp)))
		for i := range out.rdp {
			if i < len(s.rdp) {
				out.rdp[i] += s.rdp[i]
			}
			if i < len(t.rdp) {
				out.rdp[i] += t.rdp[i]
			}
		}
	}
	return out
}

// epsilon returns the ε that s spends at delta under acc.
func (s spend) epsilon(acc Accountant, delta float64) (float64, error) {
	if acc == RDP {
		eps, _, err := RDPEpsilon(DefaultOrders(), s.rdp, delta)
		return eps, err
	}
	return ZCDPEpsilon(s.rho, delta)
}

// maxLedgerBytes is the largest ledger file ReadLedgerFile reads: a run
// takes about 300 bytes, so 256 MiB holds some 10^6 runs.
const maxLedgerBytes = 256 << 20

// ReadLedgerFile reads and checks the ledger file at path. A file that
// does not exist is an empty ledger. It refuses another format, unknown
// keys, fields out of their domain, and a composed state that the runs do
// not add up to; errors name the file, the dataset and the field.
func ReadLedgerFile(path string) (*LedgerFile, error) {
	b, err := fileio.ReadLimited(path, maxLedgerBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return &LedgerFile{Format: LedgerFormatV1, Datasets: map[string]*DatasetSpend{}}, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := decodeLedger(b)
	if err != nil {
		return nil, fmt.Errorf("privacy ledger %s: %w", path, err)
	}
	return f, nil
}

// decodeLedger decodes and checks a ledger file.
func decodeLedger(b []byte) (*LedgerFile, error) {
	var f LedgerFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a privacy ledger (%s): %w", LedgerFormatV1, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the ledger's JSON object")
	}
	if err := strictjson.DuplicateKeys(b); err != nil {
		return nil, err
	}
	if f.Format != LedgerFormatV1 {
		return nil, fmt.Errorf("format %q: this fedcalib reads %q", f.Format, LedgerFormatV1)
	}
	if f.Datasets == nil {
		f.Datasets = map[string]*DatasetSpend{}
	}
	for key, d := range f.Datasets {
		if err := d.check(); err != nil {
			return nil, fmt.Errorf("dataset %s: %w; the ledger was edited or damaged: restore it (deleting it forgets every spend)", key, err)
		}
	}
	return &f, nil
}

// check checks d's fields and that its composed state is the sum of its
// runs.
func (d *DatasetSpend) check() error {
	if d == nil {
		return errors.New("null entry")
	}
	acc, err := ParseAccountant(d.Accountant)
	if err != nil {
		return fmt.Errorf("accountant: %w", err)
	}
	if err := checkDelta(d.Delta); err != nil {
		return fmt.Errorf("delta: %w", err)
	}
	if len(d.Runs) == 0 {
		return errors.New("runs is empty")
	}
	var s spend
	for i, r := range d.Runs {
		switch {
		case checkMultiplier(r.NoiseMultiplier) != nil:
			return fmt.Errorf("runs[%d].noise_multiplier is %v: want a finite value > 0", i, r.NoiseMultiplier)
		case r.Rounds < 1:
			return fmt.Errorf("runs[%d].rounds is %d: want ≥ 1", i, r.Rounds)
		case checkRate(r.SampleRate) != nil:
			return fmt.Errorf("runs[%d].sample_rate is %v: want it in (0, 1]", i, r.SampleRate)
		}
		one := released(acc, r.NoiseMultiplier, r.Rounds, r.SampleRate)
		eps, err := one.epsilon(acc, d.Delta)
		if err != nil {
			return fmt.Errorf("runs[%d]: %w", i, err)
		}
		if !closeTo(r.Rho, one.rho) || !closeTo(r.Epsilon, eps) {
			return fmt.Errorf("runs[%d] records ε %v and ρ %v, but its release spends ε %v and ρ %v", i, r.Epsilon, r.Rho, eps, one.rho)
		}
		s = s.plus(one)
	}
	if !closeTo(d.Rho, s.rho) {
		return fmt.Errorf("rho is %v but its runs add up to %v", d.Rho, s.rho)
	}
	if acc == RDP {
		if !slices.Equal(d.RDPOrders, DefaultOrders()) {
			return errors.New("rdp_orders are not dp.DefaultOrders")
		}
		if len(d.RDP) != len(s.rdp) {
			return fmt.Errorf("rdp has %d values for %d orders", len(d.RDP), len(s.rdp))
		}
		for i := range s.rdp {
			if !closeTo(d.RDP[i], s.rdp[i]) {
				return fmt.Errorf("rdp at order %v is %v but its runs add up to %v", d.RDPOrders[i], d.RDP[i], s.rdp[i])
			}
		}
	} else if d.RDPOrders != nil || d.RDP != nil {
		return errors.New("a zcdp dataset has an RDP curve")
	}
	eps, err := s.epsilon(acc, d.Delta)
	if err != nil {
		return err
	}
	if !closeTo(d.Epsilon, eps) {
		return fmt.Errorf("epsilon is %v but its runs spend %v", d.Epsilon, eps)
	}
	return nil
}

// state returns d's composed state.
func (d *DatasetSpend) state() spend {
	return spend{rho: d.Rho, rdp: d.RDP}
}

// closeTo reports whether a equals b within ledgerTolerance, relative.
func closeTo(a, b float64) bool {
	return math.Abs(a-b) <= ledgerTolerance*math.Max(math.Abs(a), math.Abs(b))
}

// A Charge is a private run about to spend privacy on a dataset.
type Charge struct {
	// Dataset is the key of the dataset (any non-empty string; fedcalib
	// uses the hex SHA-256 of its labels). Description describes it for
	// people.
	Dataset, Description string
	// Accountant and Delta are the run's accounting; they must be those
	// of the runs already recorded on the dataset.
	Accountant Accountant
	Delta      float64
	// Budget is the ε that the dataset may spend over all runs, this one
	// included; +Inf records the run without a limit. Zero is invalid.
	Budget float64
	// Release is what the run will release: its Gaussian mechanisms per
	// round (Skellam releases are refused), sample rate and rounds, as
	// planned before it runs.
	Release Release
	// Method and Calibrator are recorded with the run: the calibrator
	// method and the path of the file the run writes (or evaluates).
	Method, Calibrator string
	// Kind is LedgerRun.Kind: empty for a fit, KindEvaluation for an
	// evaluation.
	Kind string
}

// KindEvaluation is the LedgerRun.Kind of a private federated
// evaluation: noisy per-bin statistics of clients' test data.
const KindEvaluation = "evaluation"

// Reservation is a run admitted by Reserve: it holds the ledger's lock
// until Commit or Cancel. The zero value holds nothing.
type Reservation struct {
	path     string // as given, for messages
	target   string // the file it resolves to, written
	lockPath string
	key      string
	lock     *os.File
	file     *LedgerFile
	entry    *DatasetSpend // the dataset's spend with the run recorded
	run      LedgerRun
}

// Reserve locks the ledger file at path (see the format's description),
// reads it, and admits the run c if the dataset's spend with it stays
// within c.Budget: it returns a Reservation that holds the lock until its
// Commit or Cancel. Otherwise it unlocks and returns an error wrapping
// ErrBudgetExceeded, saying what was spent and what the run would bring
// it to; an error wrapping ErrInvalid for a malformed charge, or for a
// dataset already accounted under another accountant or δ. Reserve waits
// while another process holds the lock.
func Reserve(path string, c Charge) (*Reservation, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	target, err := fileio.Resolve(path)
	if err != nil {
		return nil, fmt.Errorf("privacy ledger %s: %w", path, err)
	}
	if err := checkLinks(path, target); err != nil {
		return nil, err
	}
	lockPath := target + ".lock"
	lock, err := lockFile(lockPath)
	if err != nil {
		return nil, fmt.Errorf("privacy ledger %s: locking: %w", path, err)
	}
	r, err := reserve(path, target, c)
	if err != nil {
		unlockFile(lockPath, lock)
		return nil, err
	}
	r.lock, r.lockPath = lock, lockPath
	return r, nil
}

// checkLinks refuses a ledger file target (reached by path) that an
// atomic update cannot keep whole: one that is not a regular file, or has
// several hard links.
func checkLinks(path, target string) error {
	fi, err := os.Stat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("privacy ledger %s: %w", path, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("privacy ledger %s is not a regular file: name a ledger file", path)
	}
	if n := linkCount(fi); n > 1 {
		return fmt.Errorf("privacy ledger %s has %d hard links: an update replaces the file, so the other links would keep the old spend; reach a shared ledger by a symbolic link instead", path, n)
	}
	return nil
}

func (c *Charge) validate() error {
	switch {
	case c.Dataset == "":
		return invalidf("charge without a dataset key")
	case !(c.Budget > 0):
		return invalidf("budget epsilon = %v; it must be > 0 (+Inf for no limit)", c.Budget)
	case c.Accountant != ZCDP && c.Accountant != RDP:
		return invalidf("accountant %v; it must be zcdp or rdp", c.Accountant)
	case len(c.Release.Skellam) > 0:
		return invalidf("release %q has Skellam mechanisms: a privacy ledger file records central Gaussian releases only", c.Release.Mechanism)
	}
	if err := checkDelta(c.Delta); err != nil {
		return err
	}
	return c.Release.validate()
}

// reserve does Reserve's work under the lock.
func reserve(path, target string, c Charge) (*Reservation, error) {
	f, err := ReadLedgerFile(target)
	if err != nil {
		return nil, err
	}
	prev := f.Datasets[c.Dataset]
	if prev != nil && (prev.Accountant != c.Accountant.String() || prev.Delta != c.Delta) {
		return nil, fmt.Errorf("%w: privacy ledger %s: dataset %s is accounted under %s at delta %v, this run under %s at delta %v: runs on one dataset must use one accountant and delta (use --accountant %s --delta %v)",
			ErrInvalid, path, c.Description, prev.Accountant, prev.Delta, c.Accountant, c.Delta, prev.Accountant, prev.Delta)
	}
	z, rounds, q := c.Release.NoiseMultiplier(), c.Release.Rounds, c.Release.sampleRate()
	one := released(c.Accountant, z, rounds, q)
	runEps, err := one.epsilon(c.Accountant, c.Delta)
	if err != nil {
		return nil, err
	}
	var before spend
	var spent float64
	next := &DatasetSpend{Description: c.Description, Accountant: c.Accountant.String(), Delta: c.Delta}
	if prev != nil {
		before, spent = prev.state(), prev.Epsilon
		next.Runs = slices.Clone(prev.Runs)
		if next.Description == "" {
			next.Description = prev.Description
		}
	}
	after := before.plus(one)
	eps, err := after.epsilon(c.Accountant, c.Delta)
	if err != nil {
		return nil, err
	}
	if eps > c.Budget*(1+budgetSlack) {
		return nil, fmt.Errorf("%w: privacy ledger %s: dataset %s has spent epsilon %.6g in %d run(s) (delta %v, %s); this run (epsilon %.6g alone) would bring it to %.6g, above the budget %v",
			ErrBudgetExceeded, path, c.Description, spent, len(next.Runs), c.Delta, c.Accountant, runEps, eps, c.Budget)
	}
	next.Epsilon, next.Rho, next.RDP = eps, after.rho, after.rdp
	if c.Accountant == RDP {
		next.RDPOrders = DefaultOrders()
	}
	run := LedgerRun{
		Kind: c.Kind, Method: c.Method, Calibrator: c.Calibrator, Epsilon: runEps, Rho: one.rho,
		NoiseMultiplier: z, Rounds: rounds, SampleRate: q,
	}
	return &Reservation{path: path, target: target, key: c.Dataset, file: f, entry: next, run: run}, nil
}

// Spent returns the dataset's ε with the reserved run, at its δ.
func (r *Reservation) Spent() float64 { return r.entry.Epsilon }

// RunEpsilon returns the ε of the reserved run alone.
func (r *Reservation) RunEpsilon() float64 { return r.run.Epsilon }

// Commit records the reserved run, stamped with time at, writes the
// ledger file atomically and releases the lock. Call it once the run has
// succeeded and before its output is published, so that no release is
// missing from the ledger.
func (r *Reservation) Commit(at time.Time) error {
	if r.lock == nil {
		return errors.New("privacy ledger: commit of a reservation that is not held")
	}
	defer r.Cancel()
	run := r.run
	run.Time = at.UTC().Round(time.Millisecond)
	r.entry.Runs = append(r.entry.Runs, run)
	r.file.Format = LedgerFormatV1
	r.file.Datasets[r.key] = r.entry
	b, err := json.MarshalIndent(r.file, "", "  ")
	if err != nil {
		return err
	}
	if err := fileio.Write(r.target, append(b, '\n')); err != nil {
		return fmt.Errorf("privacy ledger %s: %w", r.path, err)
	}
	return nil
}

// Cancel releases the lock without recording the run; it does nothing
// after Commit or a first Cancel, or on a nil *Reservation.
func (r *Reservation) Cancel() {
	if r != nil && r.lock != nil {
		unlockFile(r.lockPath, r.lock)
		r.lock = nil
	}
}

// WriteText writes f for people: one block per dataset, by key, with its
// total spend and one line per run.
func (f *LedgerFile) WriteText(w io.Writer) error {
	keys := make([]string, 0, len(f.Datasets))
	for k := range f.Datasets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		_, err := fmt.Fprintln(w, "no privacy spent: the ledger records no run")
		return err
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, k := range keys {
		d := f.Datasets[k]
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "dataset %s", k)
		if d.Description != "" {
			fmt.Fprintf(tw, " (%s)", d.Description)
		}
		fmt.Fprintf(tw, "\nspent\tepsilon %s at delta %v (%s, rho %s) over %d run(s)\n", num(d.Epsilon), d.Delta, d.Accountant, num(d.Rho), len(d.Runs))
		for _, r := range d.Runs {
			what := r.Method
			if r.Kind != "" {
				what = r.Kind + " of " + r.Method
			}
			fmt.Fprintf(tw, "  %s\t%s\tepsilon %s\t%d rounds, sample rate %s\t%s\n",
				r.Time.Format(time.RFC3339), what, num(r.Epsilon), r.Rounds, num(r.SampleRate), r.Calibrator)
		}
	}
	return tw.Flush()
}
