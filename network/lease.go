package network

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// One coordinator per federation. Every coordinator holds the lease, a
// key of the federation's bucket, while it runs: it creates the key, or
// takes it over once it has expired, with a revision-checked write, and
// renews it every third of its TTL. The lease's token (the revision of
// the write that took it) goes into every checkpoint, and every write of
// the bucket's settings and checkpoint is revision-checked against the
// revision the coordinator last read or wrote: a coordinator that took
// over rewrites the checkpoint at once, so that a write of the one before
// it fails, and a coordinator that cannot renew its lease for two thirds
// of the TTL, or finds it taken, stops before it releases anything more
// (invitations with a broadcast, progress, the result).

// leaseKey is the lease's key in the state bucket.
const leaseKey = "lease"

// DefaultLeaseTTL is the lease's TTL when Config.LeaseTTL is zero.
const DefaultLeaseTTL = 15 * time.Second

// lease is the value of the lease key.
type lease struct {
	// Holder names the coordinator (Config.Holder).
	Holder string `json:"holder"`
	// Token is the revision of the write that took the lease.
	Token uint64 `json:"token"`
	// TTL is how long the lease lasts without renewal.
	TTL time.Duration `json:"ttl"`
	// Renewed is the holder's clock at its last renewal (for people; the
	// expiry is judged by the bucket's timestamps and revisions).
	Renewed time.Time `json:"renewed"`
}

// holderName is the default Config.Holder.
func holderName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "an unknown host"
	}
	return fmt.Sprintf("fedcalib serve (pid %d on %s, started %s)", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
}

// leaseHolder is a run's tenure: the lease it holds and its renewal.
type leaseHolder struct {
	r      *run
	ttl    time.Duration
	cancel context.CancelCauseFunc // stops the run when the lease is lost

	mu      sync.Mutex
	l       lease
	rev     uint64    // the lease key's revision last written
	renewed time.Time // the last successful renewal, on this process's clock
	lost    error     // why the lease is lost; nil while held
	stop    chan struct{}
	done    chan struct{}
}

// conflict reports whether err is a revision-checked write's refusal: the
// key changed since the revision given (or exists, for a create).
func conflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return true
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}

// acquire takes the federation's lease: at once when nobody holds it (or
// with Config.Exclusive), after checking that the holder stopped renewing
// it when it looks expired, and not at all while it is held (ErrLeased,
// naming the holder). It starts the renewal.
func (r *run) acquire(ctx context.Context, cancel context.CancelCauseFunc) error {
	ttl := r.cfg.LeaseTTL
	h := &leaseHolder{r: r, ttl: ttl, cancel: cancel, stop: make(chan struct{}), done: make(chan struct{})}
	h.l = lease{Holder: r.cfg.Holder, TTL: ttl}
	for {
		var e jetstream.KeyValueEntry
		err := r.retry(ctx, "reading the lease", func(ctx context.Context) error {
			var err error
			e, err = r.kv.Get(ctx, leaseKey)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				e, err = nil, nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("reading the lease: %w", err)
		}
		var rev uint64
		if e != nil {
			rev = e.Revision()
			var old lease
			if err := json.Unmarshal(e.Value(), &old); err != nil {
				old = lease{Holder: "an unreadable lease", TTL: ttl}
			}
			if old.TTL <= 0 {
				old.TTL = ttl
			}
			if !r.cfg.Exclusive {
				age := time.Since(e.Created())
				if age < old.TTL {
					return fmt.Errorf("%w: federation %s is coordinated by %s, whose lease was renewed %v ago: one coordinator per federation (if it is dead, its lease expires %v after its last renewal; then run serve again)",
						ErrLeased, r.fed, old.Holder, age.Round(time.Second), old.TTL)
				}
				// It looks expired by the clocks; make sure by the revision:
				// a live holder renews it every third of its TTL.
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(old.TTL/3 + time.Second):
				}
				e2, err := r.kv.Get(ctx, leaseKey)
				if err == nil && e2.Revision() != rev {
					return fmt.Errorf("%w: federation %s is coordinated by %s, which renewed its lease just now: one coordinator per federation", ErrLeased, r.fed, old.Holder)
				}
				if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
					return fmt.Errorf("reading the lease: %w", err)
				}
			}
		}
		h.l.Renewed = time.Now()
		b, _ := json.Marshal(h.l)
		var nrev uint64
		err = r.retry(ctx, "taking the lease", func(ctx context.Context) error {
			var err error
			if e == nil {
				nrev, err = r.kv.Create(ctx, leaseKey, b)
			} else {
				nrev, err = r.kv.Update(ctx, leaseKey, b, rev)
			}
			if conflict(err) {
				return errStop{err}
			}
			return err
		})
		if conflict(err) {
			continue // another coordinator moved first: read again
		}
		if err != nil {
			return fmt.Errorf("taking the lease: %w", err)
		}
		// The token is the revision of the write that took the lease;
		// write it into the lease too (the same revision check).
		h.l.Token = nrev
		b, _ = json.Marshal(h.l)
		if h.rev, err = r.kv.Update(ctx, leaseKey, b, nrev); err != nil {
			if conflict(err) {
				continue
			}
			return fmt.Errorf("taking the lease: %w", err)
		}
		h.renewed = time.Now()
		r.lease = h
		go h.renew()
		return nil
	}
}

// renew renews the lease every third of its TTL until released, and
// stops the run (cancel, with an error wrapping ErrLeaseLost) when the
// lease was taken, or could not be renewed for two thirds of its TTL.
func (h *leaseHolder) renew() {
	defer close(h.done)
	tick := time.NewTicker(h.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
		}
		h.mu.Lock()
		l, rev := h.l, h.rev
		h.mu.Unlock()
		l.Renewed = time.Now()
		b, _ := json.Marshal(l)
		ctx, cancel := context.WithTimeout(context.Background(), h.ttl/3)
		nrev, err := h.r.kv.Update(ctx, leaseKey, b, rev)
		cancel()
		h.mu.Lock()
		switch {
		case err == nil:
			h.rev, h.renewed = nrev, time.Now()
		case conflict(err):
			h.lost = fmt.Errorf("%w: another coordinator took the lease of federation %s", ErrLeaseLost, h.r.fed)
		case time.Since(h.renewed) > 2*h.ttl/3:
			h.lost = fmt.Errorf("%w: the lease of federation %s could not be renewed for %v: %w", ErrLeaseLost, h.r.fed, time.Since(h.renewed).Round(time.Millisecond), err)
		default:
			h.r.cfg.Log.Warn("renewing the lease", "err", err)
		}
		lost := h.lost
		h.mu.Unlock()
		if lost != nil {
			h.cancel(lost)
			return
		}
	}
}

// check returns an error wrapping ErrLeaseLost unless the lease is held
// and was renewed within two thirds of its TTL: what a coordinator asks
// before it releases anything.
func (h *leaseHolder) check() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost != nil {
		return h.lost
	}
	if d := time.Since(h.renewed); d > 2*h.ttl/3 {
		h.lost = fmt.Errorf("%w: the lease of federation %s was last renewed %v ago", ErrLeaseLost, h.r.fed, d.Round(time.Millisecond))
		h.cancel(h.lost)
		return h.lost
	}
	return nil
}

// token returns the lease's token, 0 without a lease.
func (h *leaseHolder) token() uint64 {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l.Token
}

// release stops the renewal and, unless the lease was lost, deletes it
// (revision-checked), so that the next coordinator need not wait for it
// to expire.
func (h *leaseHolder) release() {
	if h == nil {
		return
	}
	close(h.stop)
	<-h.done
	h.mu.Lock()
	lost, rev := h.lost, h.rev
	h.mu.Unlock()
	if lost != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := h.r.kv.Delete(ctx, leaseKey, jetstream.LastRevision(rev)); err != nil {
		h.r.cfg.Log.Warn("releasing the lease", "err", err)
	}
}

// errStop, returned to retry, ends the retries with its error.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }
func (e errStop) Unwrap() error { return e.err }

// fencedPut writes b under key, revision-checked against the revision
// the run last read or wrote (none: the key must not exist), so that a
// coordinator that lost its lease cannot overwrite what the one that took
// it wrote. A retried write that landed already (its answer was lost) is
// recognised by its bytes.
func (r *run) fencedPut(ctx context.Context, key, what string, b []byte) error {
	err := r.retry(ctx, what, func(ctx context.Context) error {
		rev, ok := r.revs[key]
		var n uint64
		var err error
		if !ok {
			n, err = r.kv.Create(ctx, key, b)
		} else {
			n, err = r.kv.Update(ctx, key, b, rev)
		}
		if err == nil {
			r.revs[key] = n
			return nil
		}
		if conflict(err) {
			if e, gerr := r.kv.Get(ctx, key); gerr == nil && bytes.Equal(e.Value(), b) {
				r.revs[key] = e.Revision()
				return nil
			}
			return errStop{fmt.Errorf("%w: another coordinator wrote %q of the bucket %s since this one last read it", ErrLeaseLost, key, bucketName(r.fed))}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
