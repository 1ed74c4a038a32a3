package network

import (
	"errors"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// TestCoordinatorRefusesScalingBinning: FedScalBin is two protocols in
// turn, not a federation.Stepper, so NewCoordinator refuses it at once
// with ErrConfig rather than after the clients enrol.
func TestCoordinatorRefusesScalingBinning(t *testing.T) {
	_, pubs := keys(t, 3)
	cfg := Config{Spec: federation.Spec{Method: calib.MethodScalingBinning}, Rounds: federation.Rounds{T: 1, SampleRate: 1}, Clients: pubs}
	if _, err := NewCoordinator(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "cannot drive yet") {
		t.Errorf("NewCoordinator(scalbin): %v, want ErrConfig saying it cannot drive it yet", err)
	}
}
