package network

import (
	"errors"
	"strings"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
	"github.com/fedcalib/fedcalib/federation"
)

// TestCoordinatorRefusesSecureScalingBinning: FedScalBin's two stages send
// updates of different lengths, which secure aggregation's plan (one
// modulus and one dimension for the run) does not cover, so NewCoordinator
// refuses the pair at once with ErrConfig rather than after the clients
// enrol; without secure aggregation it is accepted
// (TestCoordinatorEqualsFit).
func TestCoordinatorRefusesSecureScalingBinning(t *testing.T) {
	_, pubs := keys(t, 3)
	cfg := Config{Spec: federation.Spec{Method: calib.MethodScalingBinning}, Rounds: federation.Rounds{T: 1, SampleRate: 1}, Clients: pubs}
	if _, err := NewCoordinator(cfg); err != nil {
		t.Fatalf("NewCoordinator(scalbin): %v", err)
	}
	cfg.Secure = &SecureConfig{}
	if _, err := NewCoordinator(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "secure aggregation of FedScalBin is not implemented") {
		t.Errorf("NewCoordinator(scalbin, secure): %v, want ErrConfig saying secure aggregation of it is not implemented", err)
	}
}
