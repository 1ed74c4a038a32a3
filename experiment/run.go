package experiment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
	"github.com/fedcalib/fedcalib/infer/logits"
	"github.com/fedcalib/fedcalib/internal/fileio"
)

// Output file names, in the output directory.
const (
	RunsFile       = "runs.csv"
	TimingsFile    = "timings.csv"
	SummaryFile    = "summary.md"
	TimingsSummary = "timings.md"
)

// OutputFiles returns the names of the files Run writes in the output
// directory besides the plots.
func OutputFiles() []string { return []string{RunsFile, TimingsFile, SummaryFile, TimingsSummary} }

// DefaultCheckpoint is the default least time between two checkpoints of
// runs.csv while an experiment runs.
const DefaultCheckpoint = 2 * time.Second

// Options controls Run. The zero value runs one cell per CPU and reports
// no progress.
type Options struct {
	// Workers is the number of cells run at once; zero means
	// runtime.GOMAXPROCS(0). Results do not depend on it.
	Workers int
	// Progress, if not nil, is called once before the first cell runs
	// and after each cell, from the goroutine that called Run.
	Progress func(Progress)
	// Checkpoint is the least time between two rewrites of runs.csv and
	// timings.csv while cells finish; zero means DefaultCheckpoint.
	Checkpoint time.Duration
	// Fresh recomputes every cell, replacing its row in runs.csv once it
	// has run.
	Fresh bool
	// MemoryBudget bounds the memory of each dataset's logits file
	// (logits.ReadBudget); zero means logits.DefaultMemoryBudget.
	MemoryBudget int64
}

// Progress reports how far an experiment is.
type Progress struct {
	// Done counts the cells finished, Reused included; Total all cells.
	Done, Total int
	// Reused counts the cells read back from an earlier runs.csv.
	Reused int
	// Row is the cell just finished; nil in the first call.
	Row *Row
}

// Report is what Run did.
type Report struct {
	// Rows holds the rows the summaries and plots are made from, in the
	// configuration's dataset order: for a dataset that ran, its cells in
	// grid order; for an optional dataset skipped for want of its logits
	// file, the rows an earlier run left in runs.csv, as they were.
	Rows []Row
	// Timings holds the measured times of the cells, by ID; a reused
	// cell whose time was not recorded has none.
	Timings map[string]Timing
	// Computed and Reused count the cells run now and read back; Kept
	// counts the rows of the earlier runs.csv kept as they were that are
	// not cells of the grid: those of skipped datasets (also in Rows),
	// of other parameters or earlier input files, and of datasets the
	// configuration does not list (in runs.csv only).
	Computed, Reused, Kept int
	// Skipped holds one notice per optional dataset skipped for want of
	// its logits file (saying how many of its earlier rows were kept),
	// and one per dataset with rows kept outside the grid.
	Skipped []string
	// Files lists the files written, runs.csv first.
	Files []string
	// Wall is the time Run took.
	Wall time.Duration
}

// Run runs the experiment cfg, writing its results to dir (created if
// needed): runs.csv, timings.csv, summary.md, timings.md and the plots.
// Cells already in dir/runs.csv, with the same parameters and input
// files, are reused (unless opt.Fresh). Run changes only the rows of the
// cells it runs: every other row of dir/runs.csv (and its timing in
// dir/timings.csv) is written back byte for byte — of an optional
// dataset skipped for want of its logits file, of parameters outside the
// grid or earlier input files, of a dataset the configuration does not
// list, and, until its cell is recomputed, a row of the grid with
// opt.Fresh. runs.csv and timings.csv are replaced whole each time
// (fileio.Write). The summaries and plots are made from Report.Rows. On
// an error or when ctx is done it stops the cells in flight, saves the
// finished ones with the kept rows to runs.csv and returns the error.
func Run(ctx context.Context, cfg *Config, dir string, opt Options) (*Report, error) {
	return (&runner{newFitter: federation.New}).run(ctx, cfg, dir, opt)
}

// runner runs experiments; tests replace newFitter to count fits.
type runner struct {
	newFitter func(method string, o federation.Options) (federation.Fitter, error)
}

// job is a cell to run.
type job struct {
	idx  int
	cell Cell
	id   string
	in   *input
}

type outcome struct {
	idx    int
	row    Row
	timing Timing
	err    error
}

func (r *runner) run(ctx context.Context, cfg *Config, dir string, opt Options) (*Report, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rep := &Report{}
	inputs := make([]*input, len(cfg.Datasets))
	var skipped []int // indices of the optional datasets without logits
	for i := range cfg.Datasets {
		d := &cfg.Datasets[i]
		in, err := newInput(d)
		switch {
		case errors.Is(err, os.ErrNotExist) && d.Optional && !fileExists(d.Logits):
			skipped = append(skipped, i)
			continue
		case errors.Is(err, os.ErrNotExist) && !fileExists(d.Logits):
			return nil, fmt.Errorf("datasets[%d] (%s): logits file %s does not exist: make it with fedcalib infer, or mark the dataset optional", i, d.Name, d.Logits)
		case err != nil:
			return nil, fmt.Errorf("datasets[%d] (%s): %w", i, d.Name, err)
		}
		inputs[i] = in
	}
	cells, err := cfg.Cells()
	if err != nil {
		return nil, err
	}
	byName := map[string]*input{}
	for i, in := range inputs {
		if in != nil {
			byName[cfg.Datasets[i].Name] = in
		}
	}
	var jobs []job
	for _, c := range cells {
		if in := byName[c.Dataset]; in != nil {
			in.budget = opt.MemoryBudget
			jobs = append(jobs, job{idx: len(jobs), cell: c, id: cellID(&c, in.fingerprint), in: in})
		}
	}
	if len(jobs) == 0 {
		return nil, errors.New("no dataset has its logits file, so there is nothing to run: make the logits files first (fedcalib infer)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	runsPath, timingsPath := filepath.Join(dir, RunsFile), filepath.Join(dir, TimingsFile)
	prev, err := readPrevious(runsPath, timingsPath)
	if err != nil {
		return nil, err
	}
	// Every row of runs.csv that this run does not run stays, byte for
	// byte: a row of a cell of the grid until the cell runs (then the new
	// row replaces it; without opt.Fresh a row of the grid is reused and
	// not run), every other row for good. Those of a listed dataset go
	// before its grid's rows, those of unlisted datasets last.
	jobOf := map[string]int{}
	for _, j := range jobs {
		jobOf[j.id] = j.idx
	}
	prevOf := map[string]int{}  // a grid cell's row in prev
	other := map[string][]int{} // by dataset: rows outside the grid
	var unlistedRows []int
	for i, row := range prev.rows {
		if _, ok := jobOf[row.ID]; ok {
			if _, dup := prevOf[row.ID]; !dup {
				prevOf[row.ID] = i
				continue
			}
		}
		if slices.ContainsFunc(cfg.Datasets, func(d Dataset) bool { return d.Name == row.Dataset }) {
			other[row.Dataset] = append(other[row.Dataset], i)
		} else {
			unlistedRows = append(unlistedRows, i)
		}
	}
	rep.Kept = len(prev.rows) - len(prevOf)
	skippedSet := map[string]bool{}
	for _, i := range skipped {
		d := &cfg.Datasets[i]
		skippedSet[d.Name] = true
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("skipped dataset %s: no logits file %s; kept its %s from %s", d.Name, d.Logits, count(len(other[d.Name]), "earlier row"), runsPath))
	}
	for _, d := range cfg.Datasets {
		if n := len(other[d.Name]); n > 0 && !skippedSet[d.Name] {
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("kept %s of dataset %s from %s outside this grid (other parameters or earlier input files), as they were; they are not in the summaries", count(n, "row"), d.Name, runsPath))
		}
	}
	for _, name := range unlisted(cfg, prev.rows) {
		n := 0
		for _, i := range unlistedRows {
			if prev.rows[i].Dataset == name {
				n++
			}
		}
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("kept %s of dataset %s from %s, as they were: the configuration does not list it, so they are not in the summaries", count(n, "row"), name, runsPath))
	}

	rows := make([]Row, len(jobs))
	done := make([]bool, len(jobs))
	computed := make([]bool, len(jobs))
	rep.Timings = map[string]Timing{}
	var todo []job
	for _, j := range jobs {
		if i, ok := prevOf[j.id]; ok && !opt.Fresh {
			rows[j.idx], done[j.idx] = prev.rows[i], true
			if t, ok := prev.times[j.id]; ok {
				rep.Timings[j.id] = t
			}
			rep.Reused++
			continue
		}
		todo = append(todo, j)
	}
	for name, is := range other {
		if skippedSet[name] {
			for _, i := range is {
				if t, ok := prev.times[prev.rows[i].ID]; ok {
					rep.Timings[prev.rows[i].ID] = t
				}
			}
		}
	}
	// merged returns the rows the summaries are made from: per dataset in
	// the configuration's order, the rows of a skipped dataset, or the
	// finished cells of its grid in grid order.
	merged := func() []Row {
		var out []Row
		for _, d := range cfg.Datasets {
			if skippedSet[d.Name] {
				for _, i := range other[d.Name] {
					out = append(out, prev.rows[i])
				}
			}
			for i := range rows {
				if done[i] && jobs[i].cell.Dataset == d.Name {
					out = append(out, rows[i])
				}
			}
		}
		return out
	}
	// csvFiles returns runs.csv and timings.csv as they stand: the rows in
	// the order above, each row not computed now as its bytes were.
	csvFiles := func() ([]byte, []byte) {
		rb := encodeRecord(runsHeader)
		tb := encodeRecord(timingsHeader)
		keep := func(i int) {
			rb = append(rb, prev.raw[i]...)
			tb = append(tb, prev.rawTimes[prev.rows[i].ID]...)
		}
		for _, d := range cfg.Datasets {
			for _, i := range other[d.Name] {
				keep(i)
			}
			for k := range jobs {
				if jobs[k].cell.Dataset != d.Name {
					continue
				}
				if computed[k] {
					rb = append(rb, encodeRecord(rows[k].record())...)
					if t, ok := rep.Timings[rows[k].ID]; ok {
						tb = append(tb, encodeRecord(t.record(&rows[k]))...)
					}
				} else if i, ok := prevOf[jobs[k].id]; ok {
					keep(i)
				}
			}
		}
		for _, i := range unlistedRows {
			keep(i)
		}
		return rb, tb
	}
	// save writes both files, each atomically (fileio.Write), so that an
	// interrupted run leaves every row it had plus those it finished.
	save := func() error {
		rb, tb := csvFiles()
		if err := fileio.Write(runsPath, rb); err != nil {
			return err
		}
		return fileio.Write(timingsPath, tb)
	}
	progress := func(row *Row) {
		if opt.Progress != nil {
			opt.Progress(Progress{Done: rep.Reused + rep.Computed, Total: len(jobs), Reused: rep.Reused, Row: row})
		}
	}
	progress(nil)

	if err := r.execute(ctx, todo, opt, func(o outcome) error {
		rows[o.idx], done[o.idx], computed[o.idx] = o.row, true, true
		rep.Timings[o.row.ID] = o.timing
		rep.Computed++
		progress(&rows[o.idx])
		return nil
	}, save); err != nil {
		if serr := save(); serr != nil {
			return nil, errors.Join(err, serr)
		}
		return nil, err
	}
	if err := save(); err != nil {
		return nil, err
	}
	rep.Rows = merged()
	rep.Files = []string{runsPath, timingsPath}
	files, err := writeReports(cfg, dir, rep.Rows, rep.Timings)
	if err != nil {
		return nil, err
	}
	rep.Files = append(rep.Files, files...)
	rep.Wall = time.Since(start)
	return rep, nil
}

// execute runs the jobs on a pool of workers and hands each outcome to
// collect, in the calling goroutine; it calls save at most every
// checkpoint interval. It returns the first error, of a cell or of ctx.
func (r *runner) execute(ctx context.Context, todo []job, opt Options, collect func(outcome) error, save func() error) error {
	if len(todo) == 0 {
		return ctx.Err()
	}
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(todo))
	every := opt.Checkpoint
	if every <= 0 {
		every = DefaultCheckpoint
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan job)
	results := make(chan outcome, workers)
	go func() {
		defer close(jobs)
		for _, j := range todo {
			select {
			case jobs <- j:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				row, t, err := r.runCell(ctx, j)
				if err != nil {
					err = fmt.Errorf("%s, %s, T = %d, seed %d: %w", j.cell.Dataset, j.cell.Label(), j.cell.Rounds, j.cell.Seed, err)
				}
				results <- outcome{idx: j.idx, row: row, timing: t, err: err}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(results)
	}()
	var first error
	last := time.Now()
	for o := range results {
		if first != nil {
			continue // drain
		}
		if o.err != nil {
			first = o.err
			if parent.Err() != nil {
				first = parent.Err() // the cell only stopped because we were told to
			}
			cancel()
			continue
		}
		if err := collect(o); err != nil {
			first = err
			cancel()
			continue
		}
		if time.Since(last) >= every {
			if err := save(); err != nil {
				first = err
				cancel()
			}
			last = time.Now()
		}
	}
	if first != nil {
		return first
	}
	return parent.Err()
}

// runCell fits and evaluates one cell.
func (r *runner) runCell(ctx context.Context, j job) (Row, Timing, error) {
	c := j.cell
	fed, err := j.in.federation(c.Beta)
	if err != nil {
		return Row{}, Timing{}, err
	}
	start := time.Now()
	rate := c.SampleRate
	if c.ClientsPerRound > 0 {
		if rate, err = federation.SampleRateFor(c.ClientsPerRound, fed.pop.Len()); err != nil {
			return Row{}, Timing{}, fmt.Errorf("clients_per_round: %w", err)
		}
	}
	o, err := c.spec().Options()
	if err != nil {
		return Row{}, Timing{}, err
	}
	fitter, err := r.newFitter(c.Method, o)
	if err != nil {
		return Row{}, Timing{}, err
	}
	res, err := fitter.Fit(ctx, fed.pop, federation.Rounds{T: c.Rounds, SampleRate: rate, Seed: c.Seed, Workers: 1})
	if err != nil {
		return Row{}, Timing{}, err
	}
	after, err := calib.EvaluateSet(fed.test, res.Calibrator, 0)
	if err != nil {
		return Row{}, Timing{}, fmt.Errorf("evaluating: %w", err)
	}
	row := Row{
		ID: j.id, Cell: c, Clients: fed.clients, TestRows: fed.test.Len(),
		After: after, Base: fed.base, AccuracyDrop: accuracyDropped(after, fed.base),
	}
	row.Beta, row.SampleRate = fed.beta, rate
	if pr := res.Privacy; pr != nil {
		row.EpsilonSpent, row.Sigma = pr.Epsilon, pr.Sigma
	}
	t := Timing{ID: j.id}
	for _, s := range res.Rounds {
		row.Participants += s.Participants
		row.BytesSent, row.BytesReceived = s.UploadBytes, s.DownloadBytes
		t.ComputeTotal += s.ComputeTotal
		if s.Participants > 0 && (t.ComputeMin == 0 || s.ComputeMin < t.ComputeMin) {
			t.ComputeMin = s.ComputeMin
		}
		t.ComputeMax = max(t.ComputeMax, s.ComputeMax)
	}
	t.Participants = row.Participants
	t.Wall = time.Since(start)
	return row, t, nil
}

// input is a dataset of the experiment: its fingerprint, and its data and
// partitions, loaded when a cell first needs them and then shared
// read-only by every worker.
type input struct {
	ds          *Dataset
	fingerprint string
	budget      int64 // the memory budget of its logits file

	once   sync.Once
	err    error
	file   *logits.File
	rows   []int // the rows of file in the experiment; nil for all
	labels []int // their labels
	client []int32
	split  []uint8

	mu   sync.Mutex
	feds map[float64]*federated
}

// federated is a dataset split among clients: the population, the
// global test split and the base model's metrics on it. The population
// reads each client's calibration rows from the logits file's float32
// block when the protocol asks for them; only the global test split is
// held as float64, since every cell evaluates on it.
type federated struct {
	once    sync.Once
	err     error
	beta    float64
	clients int
	pop     *federation.RowPopulation
	test    *calib.Set
	base    calib.Metrics
}

// newInput fingerprints the dataset's files: SHA-256 of the logits file,
// the partition and holdout files, the input kind when it is
// probabilities, and the partition settings.
func newInput(d *Dataset) (*input, error) {
	var fp strings.Builder
	fmt.Fprintf(&fp, "name=%s", d.Name)
	for _, f := range []struct{ what, path string }{
		{"logits", d.Logits}, {"partition", d.Partition.File}, {"holdout", d.Partition.Holdout},
	} {
		if f.path == "" {
			continue
		}
		h, err := fileio.SHA256(f.path)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&fp, "|%s=%s", f.what, h)
	}
	if d.Input == logits.InputProbabilities {
		fmt.Fprintf(&fp, "|input=%s", d.Input)
	}
	p := &d.Partition
	fmt.Fprintf(&fp, "|clients=%d|seed=%d|natural=%t|rule=%s|min_samples=%d", p.Clients, p.Seed, p.Natural, p.Rule, p.MinSamples)
	if p.Clients > 0 {
		f := p.fractions()
		fmt.Fprintf(&fp, "|fractions=%s/%s/%s", formatFloat(f.Train), formatFloat(f.Calibration), formatFloat(f.Test))
	}
	return &input{ds: d, fingerprint: fp.String(), feds: map[float64]*federated{}}, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// load reads the logits file, keeping only the holdout rows when the
// partition has a holdout.
func (in *input) load() error {
	in.once.Do(func() {
		f, err := logits.ReadBudget(in.ds.Logits, in.budget)
		if err != nil {
			in.err = err
			return
		}
		// The dataset's input, else what the file records (infer records
		// a Softmax model's probabilities); a contradiction is refused.
		kind := in.ds.Input
		switch {
		case kind != "" && f.Input != "" && kind != f.Input:
			in.err = fmt.Errorf("%s: the experiment says input %s, but the file records that it holds %s", in.ds.Logits, kind, f.Input)
			return
		case kind == "":
			kind = f.Input
		}
		if kind == logits.InputProbabilities {
			if err := f.FromProbabilities(); err != nil {
				in.err = fmt.Errorf("%s (input: probabilities): %w", in.ds.Logits, err)
				return
			}
		}
		labels := f.IntLabels()
		in.file, in.labels, in.client, in.split = f, labels, f.Client, f.Split
		h := in.ds.Partition.Holdout
		if h == "" {
			return
		}
		hp, err := federation.ReadPartition(h)
		if err != nil {
			in.err = err
			return
		}
		if err := hp.Check(labels, f.Classes); err != nil {
			in.err = fmt.Errorf("holdout %s does not fit %s: %w", h, in.ds.Logits, err)
			return
		}
		in.rows = append(hp.Rows(federation.Calibration), hp.Rows(federation.Test)...)
		slices.Sort(in.rows)
		in.labels = pick(labels, in.rows)
		if f.Client != nil {
			in.client = pick(f.Client, in.rows)
		}
		if f.Split != nil {
			in.split = pick(f.Split, in.rows)
		}
	})
	return in.err
}

func pick[T any](col []T, rows []int) []T {
	out := make([]T, len(rows))
	for k, i := range rows {
		out[k] = col[i]
	}
	return out
}

// federation returns the dataset split among clients for Dirichlet
// concentration beta (0 for a partition file or a natural partition).
func (in *input) federation(beta float64) (*federated, error) {
	if err := in.load(); err != nil {
		return nil, err
	}
	in.mu.Lock()
	f, ok := in.feds[beta]
	if !ok {
		f = &federated{}
		in.feds[beta] = f
	}
	in.mu.Unlock()
	f.once.Do(func() { f.err = f.make(in, beta) })
	return f, f.err
}

func (f *federated) make(in *input, beta float64) error {
	p := &in.ds.Partition
	src := federation.Source{File: p.File, Seed: p.Seed, Rule: p.Rule, MinSamples: p.MinSamples}
	if p.Clients > 0 {
		src.Clients, src.Beta, src.Fractions = p.Clients, beta, p.fractions()
	}
	part, _, err := src.Partition(in.labels, in.file.Classes, in.client, in.split)
	switch {
	case errors.Is(err, federation.ErrNoClientColumn):
		return fmt.Errorf("%s has no client column for a natural partition: give the dataset a partition file or {clients, beta}", in.ds.Logits)
	case err != nil:
		return fmt.Errorf("%s: %w", in.ds.Logits, err)
	}
	rows := datasetRows{in.file, in.rows}
	if f.pop, err = federation.NewRowPopulation(rows, part, federation.Calibration); err != nil {
		return fmt.Errorf("%s: %w", in.ds.Logits, err)
	}
	test := part.Rows(federation.Test)
	if len(test) == 0 {
		return fmt.Errorf("%s: the partition has no test rows to evaluate on", in.ds.Logits)
	}
	f.beta, f.clients, f.test = part.Beta, part.Len(), federation.RowSet(rows, test)
	if f.base, err = calib.EvaluateSet(f.test, nil, 0); err != nil {
		return fmt.Errorf("%s: %w", in.ds.Logits, err)
	}
	return nil
}

// datasetRows is the rows of a dataset's logits file that an experiment
// uses, read in place as a federation.RowSource: row i is file row
// rows[i], or row i itself when rows is nil (no holdout).
type datasetRows struct {
	file *logits.File
	rows []int
}

func (d datasetRows) Len() int {
	if d.rows == nil {
		return d.file.Len()
	}
	return len(d.rows)
}

func (d datasetRows) NumClasses() int          { return d.file.Classes }
func (d datasetRows) Label(i int) int          { return d.file.Label(d.row(i)) }
func (d datasetRows) Row(dst []float64, i int) { d.file.Row(dst, d.row(i)) }
func (d datasetRows) row(i int) int {
	if d.rows == nil {
		return i
	}
	return d.rows[i]
}

// unlisted returns, in order of appearance, the datasets of rows that
// cfg does not list.
func unlisted(cfg *Config, rows []Row) []string {
	var out []string
	for _, r := range rows {
		listed := slices.ContainsFunc(cfg.Datasets, func(d Dataset) bool { return d.Name == r.Dataset })
		if !listed && !slices.Contains(out, r.Dataset) {
			out = append(out, r.Dataset)
		}
	}
	return out
}

// writeReports writes summary.md, timings.md and the plots of rows to dir
// and returns their paths.
func writeReports(cfg *Config, dir string, rows []Row, times map[string]Timing) ([]string, error) {
	var sb, tb bytes.Buffer
	if err := WriteSummary(&sb, cfg, rows); err != nil {
		return nil, err
	}
	if err := WriteTimings(&tb, cfg, rows, times); err != nil {
		return nil, err
	}
	files := []string{filepath.Join(dir, SummaryFile), filepath.Join(dir, TimingsSummary)}
	if err := fileio.Write(files[0], sb.Bytes()); err != nil {
		return nil, err
	}
	if err := fileio.Write(files[1], tb.Bytes()); err != nil {
		return nil, err
	}
	plots, err := drawPlots(cfg, dir, rows)
	return append(files, plots...), err
}
