package network

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// settings are the parts of a Config a stored run must share with the
// config that resumes it.
type settings struct {
	Federation  string          `json:"federation"`
	Spec        federation.Spec `json:"spec"`
	T           int             `json:"rounds"`
	SampleRate  float64         `json:"sample_rate"`
	Seed        uint64          `json:"seed"`
	DrawSeed    bool            `json:"draw_seed"`
	SecureNoise bool            `json:"secure_noise"`
	Clients     []string        `json:"clients"`
	Classes     int             `json:"classes"`
	Secure      *SecureConfig   `json:"secure,omitempty"`
}

// checkpoint is what the coordinator commits after every round.
type checkpoint struct {
	// Settings is empty: the settings, with the allow-list (most of a
	// checkpoint's size with many clients), are stored once, under
	// settingsKey. A checkpoint of fedcalib before wire version 3 holds
	// them here.
	Settings settings            `json:"settings,omitzero"`
	Seed     uint64              `json:"seed"`
	Classes  int                 `json:"classes"`
	Counts   []float64           `json:"counts,omitempty"`
	Enrolled []int               `json:"enrolled"`
	State    json.RawMessage     `json:"state"`
	Records  []calib.RoundRecord `json:"records"`
	// Survivors counts, per round closed, the clients whose distributed
	// noise reached the sum (distributed noise only).
	Survivors []int `json:"survivors,omitempty"`
	// Lease is the token of the lease of the coordinator that wrote the
	// checkpoint (see lease.go); 0 before fedcalib had leases.
	Lease uint64 `json:"lease,omitempty"`
}

// Keys of the state bucket.
const (
	checkpointKey = "checkpoint"
	settingsKey   = "settings"
)

// open creates the state bucket, and deletes the update stream of a
// store written by fedcalib before wire version 3, which would capture
// the updates (and answer them) in the coordinator's place.
func (r *run) open(ctx context.Context) error {
	return r.retry(ctx, "opening the store", r.open1)
}

func (r *run) open1(ctx context.Context) error {
	if _, err := r.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("asking the NATS server for the account's JetStream: %w", err)
	}
	if err := r.js.DeleteStream(ctx, oldStreamName(r.fed)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("deleting the update stream of an older version: %w", err)
	}
	var err error
	r.kv, err = r.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:   bucketName(r.fed),
		Storage:  jetstream.FileStorage,
		Replicas: r.cfg.Replicas,
		History:  1,
	})
	if err != nil {
		return fmt.Errorf("creating the state bucket: %w", err)
	}
	return nil
}

// load reads the checkpoint, if any, and reports whether there was one.
func (r *run) load(ctx context.Context) (bool, error) {
	cfg := r.cfg
	want := settings{
		Federation: r.fed, Spec: cfg.Spec, T: cfg.Rounds.T, SampleRate: cfg.Rounds.SampleRate,
		DrawSeed: cfg.DrawSeed, SecureNoise: cfg.SecureNoise, Clients: cfg.Clients, Classes: cfg.Classes,
		Secure: cfg.Secure,
	}
	if !cfg.DrawSeed {
		want.Seed = cfg.Rounds.Seed
	}
	// Compare through JSON, as the stored settings were written.
	wb, err := json.Marshal(want)
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(wb, &want); err != nil {
		return false, err
	}
	r.want = want
	r.cp = checkpoint{Seed: want.Seed, Classes: cfg.Classes}
	var e jetstream.KeyValueEntry
	err = r.retry(ctx, "reading the checkpoint", func(ctx context.Context) error {
		var err error
		e, err = r.kv.Get(ctx, checkpointKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		return err
	})
	if err == nil && e == nil {
		err = jetstream.ErrKeyNotFound
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		if cfg.DrawSeed {
			var b [8]byte
			if _, err := rand.Read(b[:]); err != nil {
				return false, err
			}
			r.cp.Seed = binary.LittleEndian.Uint64(b[:])
		}
		r.setWelcome()
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the checkpoint: %w", err)
	}
	r.revs[checkpointKey] = e.Revision()
	var cp checkpoint
	if err := json.Unmarshal(e.Value(), &cp); err != nil {
		return false, fmt.Errorf("%w: the checkpoint cannot be read: %w", ErrStore, err)
	}
	old := !reflect.ValueOf(cp.Settings).IsZero() // written before wire version 3
	if !old {
		err = r.retry(ctx, "reading the settings", func(ctx context.Context) error {
			var err error
			e, err = r.kv.Get(ctx, settingsKey)
			return err
		})
		if err != nil {
			return false, fmt.Errorf("%w: the store has a checkpoint but no settings: %w", ErrStore, err)
		}
		r.revs[settingsKey] = e.Revision()
		if err := json.Unmarshal(e.Value(), &cp.Settings); err != nil {
			return false, fmt.Errorf("%w: the stored settings cannot be read: %w", ErrStore, err)
		}
	}
	if !reflect.DeepEqual(cp.Settings, want) {
		return false, fmt.Errorf("%w: the store holds a run of federation %q with other settings: %s; resume it with the same settings, or start the new run elsewhere", ErrStore, r.fed, strings.Join(diffSettings(cp.Settings, want), "; "))
	}
	if old {
		if err := r.storeSettings(ctx); err != nil {
			return false, err
		}
	}
	cp.Settings = settings{}
	r.cp = cp
	r.started = true
	for _, k := range cp.Enrolled {
		r.ready[k] = nil
	}
	r.setWelcome()
	return true, nil
}

// storeSettings stores the run's settings, once, before its first
// checkpoint.
func (r *run) storeSettings(ctx context.Context) error {
	return r.put(ctx, settingsKey, "storing the settings", &r.want)
}

// commit stores the checkpoint.
func (r *run) commit(ctx context.Context) (err error) {
	defer r.observeCheckpoint(time.Now(), &err)
	state, err := r.server.(federation.StateSaver).State()
	if err != nil {
		return err
	}
	r.cp.State = state
	r.cp.Lease = r.lease.token()
	return r.put(ctx, checkpointKey, "committing the checkpoint", &r.cp)
}

// put stores v as JSON under key of the bucket, revision-checked
// (fencedPut) and retrying as r.retry does; what names the step in
// errors.
func (r *run) put(ctx context.Context, key, what string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.fencedPut(ctx, key, what, b)
}

// settingNames names the fields of settings and of federation.Spec for
// diffSettings, after the flags of serve that set them.
var settingNames = map[string]string{
	"Federation": "federation", "T": "rounds", "SampleRate": "sample rate", "Seed": "seed",
	"DrawSeed": "seed drawn at random (no --seed)", "SecureNoise": "noise from crypto/rand (no --seed)", "Classes": "classes",
	"Secure": "secure aggregation", "Method": "method", "Mexp": "bins-exp", "Weighting": "weighting",
	"ServerLR": "server-lr", "Clip": "clip", "Epsilon": "epsilon", "Delta": "delta", "ClipPos": "clip-pos",
	"ClipNeg": "clip-neg", "Accountant": "accountant", "AlphaZ": "dp-alpha-z", "ODIR": "odir",
}

// diffSettings describes how the settings now differ from those stored,
// one item a setting, values included (the allow-list by its length and
// first differing line).
func diffSettings(stored, now settings) []string {
	var out []string
	describe := func(v reflect.Value) string {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				return "none"
			}
			b, _ := json.Marshal(v.Interface())
			return fmt.Sprintf("%.80s", b)
		case reflect.String:
			return fmt.Sprintf("%q", v.String())
		}
		return fmt.Sprintf("%v", v.Interface())
	}
	var walk func(a, b reflect.Value)
	walk = func(a, b reflect.Value) {
		for i := range a.NumField() {
			f := a.Type().Field(i)
			x, y := a.Field(i), b.Field(i)
			if reflect.DeepEqual(x.Interface(), y.Interface()) {
				continue
			}
			switch f.Name {
			case "Spec":
				walk(x, y)
				continue
			case "Clients":
				xs, ys := x.Interface().([]string), y.Interface().([]string)
				k := 0
				for k < min(len(xs), len(ys)) && xs[k] == ys[k] {
					k++
				}
				out = append(out, fmt.Sprintf("allow-list: stored %d keys, now %d, the first different is client %d's", len(xs), len(ys), k))
				continue
			}
			name := settingNames[f.Name]
			if name == "" {
				name = f.Name
			}
			out = append(out, fmt.Sprintf("%s: stored %s, now %s", name, describe(x), describe(y)))
		}
	}
	walk(reflect.ValueOf(stored), reflect.ValueOf(now))
	return out
}
