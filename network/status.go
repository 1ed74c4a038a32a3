package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoRun reports a store that holds no run of the federation.
var ErrNoRun = errors.New("no run of the federation in the store")

// Status is a federation's state as its store holds it: what
// "fedcalib status" prints. The zero value is a federation with no round
// closed.
type Status struct {
	// Federation is the federation's name.
	Federation string `json:"federation"`
	// Method is the protocol's method.
	Method string `json:"method"`
	// Round is the last round closed, 0 before round 1; Rounds the
	// number of rounds of the run (2T for scalbin).
	Round  int `json:"round"`
	Rounds int `json:"rounds"`
	// Clients is the number of allow-listed clients, Enrolled of those
	// that enrolled.
	Clients  int `json:"clients"`
	Enrolled int `json:"enrolled"`
	// Participants and Dropouts are the last round's; Updates and
	// DropoutsTotal their sums over the rounds closed.
	Participants  []int `json:"participants"`
	Dropouts      []int `json:"dropouts"`
	Updates       int   `json:"updates"`
	DropoutsTotal int   `json:"dropouts_total"`
	// Epsilon is the privacy ε spent by the rounds closed, EpsilonBudget
	// the ε the run spends by its last round; both 0 without privacy.
	Epsilon       float64 `json:"epsilon"`
	EpsilonBudget float64 `json:"epsilon_budget"`
	// Rho is the zCDP ρ spent by the rounds closed, 0 without privacy.
	Rho float64 `json:"rho"`
	// Checkpoint is when the checkpoint was last written.
	Checkpoint time.Time `json:"checkpoint"`
	// Lease is the coordinator's lease in the store; nil when there is
	// none (no coordinator took one, or it released it).
	Lease *LeaseStatus `json:"lease,omitempty"`
}

// LeaseStatus is the coordinator's lease as the store holds it. The zero
// value is a lease of no one, expired.
type LeaseStatus struct {
	// Holder names the coordinator that holds or held it.
	Holder string `json:"holder"`
	// Written is when the lease was last taken or renewed (the store's
	// clock); Expires is Written plus its TTL.
	Written time.Time `json:"written"`
	Expires time.Time `json:"expires"`
	// Live reports whether it had not expired when it was read: a
	// coordinator holds it, or was stopped less than a TTL ago.
	Live bool `json:"live"`
}

// readLease reads the coordinator's lease from kv, nil when there is
// none.
func readLease(ctx context.Context, kv jetstream.KeyValue, now time.Time) (*LeaseStatus, error) {
	e, err := kv.Get(ctx, leaseKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the lease: %w", err)
	}
	var l lease
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		return nil, fmt.Errorf("%w: the lease cannot be read: %w", ErrStore, err)
	}
	exp := e.Created().Add(l.TTL)
	return &LeaseStatus{Holder: l.Holder, Written: e.Created(), Expires: exp, Live: now.Before(exp)}, nil
}

// ReadStatus reads federation fed's status over nc, a connection allowed
// to read the federation's state bucket (the coordinator's credentials),
// without writing anything. Errors wrap ErrNoRun or ErrStore.
func ReadStatus(ctx context.Context, nc *nats.Conn, fed string) (*Status, error) {
	fed = fedOr(fed)
	if err := ValidFederation(fed); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, bucketName(fed))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w %q", ErrNoRun, fed)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the state bucket: %w", err)
	}
	ce, err := kv.Get(ctx, checkpointKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w %q: no checkpoint yet", ErrNoRun, fed)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint: %w", err)
	}
	var cp checkpoint
	if err := json.Unmarshal(ce.Value(), &cp); err != nil {
		return nil, fmt.Errorf("%w: the checkpoint cannot be read: %w", ErrStore, err)
	}
	set := cp.Settings
	if reflectZero(set) {
		se, err := kv.Get(ctx, settingsKey)
		if err != nil {
			return nil, fmt.Errorf("%w: the store has a checkpoint but no settings: %w", ErrStore, err)
		}
		if err := json.Unmarshal(se.Value(), &set); err != nil {
			return nil, fmt.Errorf("%w: the stored settings cannot be read: %w", ErrStore, err)
		}
	}
	st, err := statusOf(fed, set, cp, ce.Created())
	if err != nil {
		return nil, err
	}
	if st.Lease, err = readLease(ctx, kv, time.Now()); err != nil {
		return nil, err
	}
	return st, nil
}

func reflectZero(s settings) bool { return s.Federation == "" && s.Spec.Method == "" }

// statusOf is the status of a checkpoint cp of a run with settings set,
// written at when. The ε spent is that of the server step restored from
// the checkpoint, as the coordinator computes it.
func statusOf(fed string, set settings, cp checkpoint, when time.Time) (*Status, error) {
	st := &Status{
		Federation: fed, Method: set.Spec.Method, Round: len(cp.Records),
		Clients: len(set.Clients), Enrolled: len(cp.Enrolled),
		EpsilonBudget: set.Spec.Epsilon, Checkpoint: when,
		Participants: []int{}, Dropouts: []int{},
	}
	for _, r := range cp.Records {
		st.Updates += len(r.Participants)
		st.DropoutsTotal += len(r.Dropouts)
	}
	if n := len(cp.Records); n > 0 {
		st.Participants, st.Dropouts = cp.Records[n-1].Participants, cp.Records[n-1].Dropouts
	}
	// The server step, restored as a resuming coordinator restores it
	// (without secure aggregation's plan, which the ledger does not need).
	c := &Coordinator{cfg: Config{Spec: set.Spec, Clients: set.Clients, SecureNoise: set.SecureNoise}, fed: fed}
	c.cfg.Rounds.T, c.cfg.Rounds.SampleRate = set.T, set.SampleRate
	c.cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &run{Coordinator: c, cp: cp}
	if err := r.steps(true); err != nil {
		return nil, err
	}
	st.Rounds = r.sched.Rounds()
	if set.Spec.Private() && st.Round > 0 {
		res, err := r.server.Result()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStore, err)
		}
		if res.Privacy != nil {
			st.Epsilon, st.Rho = res.Privacy.Epsilon, res.Privacy.Rho
		}
	}
	return st, nil
}

// ReadStoreStatus reads federation fed's status from dir, the --store of
// an embedded server, whether its coordinator runs or not, without
// disturbing it: it copies the federation's state stream to a temporary
// directory (taking no lock and writing nothing in dir), opens the copy
// with a server of its own that listens on no port, and reads it as
// ReadStatus does. A copy taken while the coordinator replaces its
// checkpoint may hold none (the store keeps one revision): it copies
// again, three times in all, before it reports ErrNoRun. Errors wrap
// ErrNoRun or ErrStore.
func ReadStoreStatus(ctx context.Context, dir, fed string) (*Status, error) {
	fed = fedOr(fed)
	if err := ValidFederation(fed); err != nil {
		return nil, err
	}
	// NATS keeps JetStream's files in the "jetstream" folder of its
	// StoreDir, which the embedded server sets to dir/jetstream.
	stream := filepath.Join(server.JetStreamStoreDir, server.DEFAULT_GLOBAL_ACCOUNT, "streams", "KV_"+bucketName(fed))
	src := filepath.Join(dir, "jetstream", stream)
	if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w %q in %s", ErrNoRun, fed, dir)
	} else if err != nil {
		return nil, err
	}
	var st *Status
	var err error
	for try := range 3 {
		if try > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		if st, err = readCopy(ctx, src, stream, fed); !errors.Is(err, ErrNoRun) {
			break
		}
	}
	return st, err
}

// readCopy copies the state stream src (at the relative path stream of
// a store) to a temporary directory and reads federation fed's status
// from the copy.
func readCopy(ctx context.Context, src, stream, fed string) (*Status, error) {
	tmp, err := os.MkdirTemp("", "fedcalib-status-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(src, filepath.Join(tmp, stream)); err != nil {
		return nil, fmt.Errorf("copying the store: %w", err)
	}
	ns, err := server.NewServer(&server.Options{
		JetStream: true, StoreDir: tmp,
		DontListen: true, NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, fmt.Errorf("%w: the store's copy could not be opened in 10s", ErrStore)
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	return ReadStatus(ctx, nc, fed)
}

// copyTree copies the regular files under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) { // removed by the running server as it compacted
			return nil
		}
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
}
