package federation

import (
	"encoding/json"
	"fmt"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/dp"
)

// StateSaver is implemented by the server steps of this package, so that
// a coordinator can commit the server's state durably after every round
// and resume after a crash exactly where it stopped. The privacy ledger is
// part of the state: a restart never resets it.
type StateSaver interface {
	// State returns the server's state after the last EndRound, encoded
	// as JSON. It refuses while a round is open (after an Add and before
	// its EndRound).
	State() ([]byte, error)
	// Restore replaces the server's state with one that State returned.
	// The server must have been made by the same protocol for the same
	// federation and rounds; Restore refuses a state of another protocol
	// or shape.
	Restore(state []byte) error
	// Closed returns the number of the last round closed by EndRound, 0
	// before the first.
	Closed() int
}

// serverState is the encoded state of a server step.
type serverState struct {
	Protocol string                 `json:"protocol"`
	Closed   int                    `json:"closed"`             // last round closed
	Cum      *calib.Histograms      `json:"cum,omitempty"`      // binning: sums over rounds
	Noisy    int                    `json:"noisy,omitempty"`    // binning: rounds that added noise
	ExtVar   float64                `json:"ext_var,omitempty"`  // binning: variance of distributed rounds' noise (units of C₊²)
	W        []float64              `json:"w,omitempty"`        // scaling: w^t
	Value    *calib.ValueHistograms `json:"value,omitempty"`    // scaling-binning: the binning stage's sums over rounds
	Releases []dp.Release           `json:"releases,omitempty"` // the ledger
}

// restoreLedger replays releases into a fresh ledger of the same budget.
func restoreLedger(r *resolved, releases []dp.Release) (*dp.Ledger, error) {
	if r == nil {
		if len(releases) > 0 {
			return nil, fmt.Errorf("the state records %d private releases but the fit is not private", len(releases))
		}
		return nil, nil
	}
	l, err := r.ledger()
	if err != nil || l == nil {
		return l, err
	}
	for _, rel := range releases {
		if err := l.Spend(rel); err != nil {
			return nil, fmt.Errorf("replaying the ledger: %w", err)
		}
	}
	return l, nil
}

func releasesOf(l *dp.Ledger) []dp.Release {
	if l == nil {
		return nil
	}
	return l.Releases()
}

func decodeState(protocol string, b []byte) (*serverState, error) {
	var st serverState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("server state: %w", err)
	}
	if st.Protocol != protocol {
		return nil, fmt.Errorf("server state is of protocol %q, not %q", st.Protocol, protocol)
	}
	if st.Closed < 0 {
		return nil, fmt.Errorf("server state: round %d", st.Closed)
	}
	return &st, nil
}

// State returns the binning server's state.
func (s *binServer) State() ([]byte, error) {
	if s.open {
		return nil, fmt.Errorf("%s: round %d is open", s.spec.name, s.closed+1)
	}
	return json.Marshal(serverState{Protocol: s.spec.name, Closed: s.closed, Cum: s.cum, Noisy: s.noisy, ExtVar: s.extVar, Releases: releasesOf(s.ledger)})
}

// Restore replaces the binning server's state.
func (s *binServer) Restore(b []byte) error {
	st, err := decodeState(s.spec.name, b)
	if err != nil {
		return err
	}
	if st.Cum == nil || st.Cum.Classes != s.classes || st.Cum.Bins != s.spec.bins {
		return fmt.Errorf("server state: histograms do not fit %d classes × %d bins", s.classes, s.spec.bins)
	}
	if err := st.Cum.Validate(); err != nil {
		return fmt.Errorf("server state: %w", err)
	}
	l, err := restoreLedger(s.priv, st.Releases)
	if err != nil {
		return err
	}
	s.cum, s.noisy, s.extVar, s.closed, s.ledger, s.open = st.Cum, st.Noisy, st.ExtVar, st.Closed, l, false
	s.round.Reset()
	return nil
}

// Closed returns the last round closed.
func (s *binServer) Closed() int { return s.closed }

// State returns the FedAvg server's state.
func (s *scaleServer) State() ([]byte, error) {
	if s.open {
		return nil, fmt.Errorf("%s: round %d is open", s.name, s.closed+1)
	}
	return json.Marshal(serverState{Protocol: s.name, Closed: s.closed, W: s.w, Releases: releasesOf(s.ledger)})
}

// Restore replaces the FedAvg server's state.
func (s *scaleServer) Restore(b []byte) error {
	st, err := decodeState(s.name, b)
	if err != nil {
		return err
	}
	if len(st.W) != len(s.w) {
		return fmt.Errorf("server state: %d parameters, want %d", len(st.W), len(s.w))
	}
	if err := s.init.SetParams(st.W); err != nil {
		return fmt.Errorf("server state: %w", err)
	}
	l, err := restoreLedger(s.priv, st.Releases)
	if err != nil {
		return err
	}
	copy(s.w, st.W)
	s.closed, s.ledger, s.open = st.Closed, l, false
	clear(s.sum)
	return nil
}

// Closed returns the last round closed.
func (s *scaleServer) Closed() int { return s.closed }

// State returns FedScalBin's state: the scaling stage's parameters, the
// binning stage's sums and the whole fit's ledger.
func (s *scalBinServer) State() ([]byte, error) {
	if s.scale.open || s.value.open {
		return nil, fmt.Errorf("%s: round %d is open", protocolScalBin, s.Closed()+1)
	}
	return json.Marshal(serverState{Protocol: protocolScalBin, Closed: s.Closed(), W: s.scale.w, Value: s.value.cum, Releases: releasesOf(s.value.ledger)})
}

// Restore replaces FedScalBin's state; both stages share the ledger
// replayed from it.
func (s *scalBinServer) Restore(b []byte) error {
	st, err := decodeState(protocolScalBin, b)
	if err != nil {
		return err
	}
	T, cum := s.binning.T, s.value.cum
	switch {
	case st.Closed > 2*T:
		return fmt.Errorf("server state: round %d of %d", st.Closed, 2*T)
	case len(st.W) != len(s.scale.w):
		return fmt.Errorf("server state: %d parameters, want %d", len(st.W), len(s.scale.w))
	case st.Value == nil || st.Value.Classes != cum.Classes || st.Value.Bins != cum.Bins:
		return fmt.Errorf("server state: value histograms do not fit %d classes × %d bins", cum.Classes, cum.Bins)
	}
	if err := st.Value.Validate(); err != nil {
		return fmt.Errorf("server state: %w", err)
	}
	if err := s.scale.init.SetParams(st.W); err != nil {
		return fmt.Errorf("server state: %w", err)
	}
	l, err := restoreLedger(s.value.priv, st.Releases)
	if err != nil {
		return err
	}
	copy(s.scale.w, st.W)
	clear(s.scale.sum)
	s.scale.closed, s.scale.ledger, s.scale.open = min(st.Closed, T), l, false
	s.value.cum, s.value.closed, s.value.ledger, s.value.open = st.Value, max(st.Closed-T, 0), l, false
	s.value.round = calib.NewValueHistograms(cum.Classes, cum.Bins)
	if st.Closed >= T {
		s.value.t = st.W[0]
	}
	return nil
}

// Closed returns the last round closed, 0 to 2T.
func (s *scalBinServer) Closed() int { return s.scale.closed + s.value.closed }
