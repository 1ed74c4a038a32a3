package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/fedcalib/fedcalib/network"
)

// TestExitRetry: the failures a retry may cure exit 4, however deeply
// wrapped; the others of serve and join exit 2.
func TestExitRetry(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{network.ErrUnreachable, ExitRetry},
		{network.ErrTooFewClients, ExitRetry},
		{network.ErrAborted, ExitRetry},
		{network.ErrLeased, ExitRetry},
		{network.ErrLeaseLost, ExitRetry},
		{network.ErrLocked, ExitRetry},
		{nats.ErrConnectionClosed, ExitRetry},
		{nats.ErrNoServers, ExitRetry},
		{network.ErrNotAllowed, ExitUsage},
		{network.ErrFederation, ExitUsage},
		{network.ErrKey, ExitUsage},
		{network.ErrStore, ExitUsage},
		{network.ErrConfig, ExitUsage},
		{network.ErrAllowList, ExitUsage},
		{network.ErrInsecure, ExitUsage},
		{errors.New("anything else"), ExitUsage},
	} {
		wrapped := fmt.Errorf("round 3: %w", fmt.Errorf("committing: %w", tc.err))
		if got := exitStatus(wrapped); got != tc.want {
			t.Errorf("exit status of %v = %d, want %d", tc.err, got, tc.want)
		}
	}
	if ExitRetry == ExitUsage || ExitRetry == ExitEnvironment || ExitRetry == ExitFailed {
		t.Errorf("ExitRetry %d is not distinct", ExitRetry)
	}
}
