package metrics_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fedcalib/fedcalib/network"
	"github.com/fedcalib/fedcalib/network/metrics"
)

// TestDocumentedMetrics: every metric NETWORK.md, the Grafana dashboard
// and the alerting rules name exists, and NETWORK.md names every metric.
func TestDocumentedMetrics(t *testing.T) {
	c := metrics.NewCoordinator(metrics.CoordinatorOptions{Clients: 2, Connected: func() bool { return true }, Reconnects: func() uint64 { return 0 }, Connections: func() int { return 1 }})
	// Events that give every labelled series a child.
	c.RoundClosed(network.RoundObservation{Round: 1, Refused: []string{network.RefusedNorm}, Duration: time.Second})
	c.SecureStage("keys", time.Millisecond)
	cl := metrics.NewClient()
	have := map[string]bool{}
	for _, g := range []func() []string{
		func() []string { return names(t, c.Registry().Gather) },
		func() []string { return names(t, cl.Registry().Gather) },
	} {
		for _, n := range g() {
			have[n] = true
		}
	}
	metric := regexp.MustCompile(`fedcalib_(?:coordinator|client)_[a-z_]+`)
	strip := regexp.MustCompile(`_(?:bucket|sum|count)$`)
	inDoc := map[string]bool{}
	for _, file := range []string{"../../docs/NETWORK.md", "../../docs/monitoring/grafana-dashboard.json", "../../docs/monitoring/fedcalib-alerts.yml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range metric.FindAllString(string(b), -1) {
			if !have[n] {
				n = strip.ReplaceAllString(n, "")
			}
			if !have[n] {
				t.Errorf("%s names %s, which no registry has", file, n)
			}
			if strings.HasSuffix(file, ".md") {
				inDoc[n] = true
			}
		}
	}
	for n := range have {
		if strings.HasPrefix(n, "fedcalib_") && !inDoc[n] {
			t.Errorf("NETWORK.md does not document %s", n)
		}
	}
}

// names returns the names of the metric families gather gathers.
func names(t *testing.T, gather func() ([]*dto.MetricFamily, error)) []string {
	t.Helper()
	fams, err := gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fams {
		out = append(out, f.GetName())
	}
	return out
}
