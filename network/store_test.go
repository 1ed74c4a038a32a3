package network

import (
	"reflect"
	"testing"

	"github.com/fedcalib/fedcalib/federation"
)

// TestDiffSettings: a store mismatch names each setting that differs,
// with both values.
func TestDiffSettings(t *testing.T) {
	stored := settings{Federation: "F", Spec: federation.Spec{Method: "temp", Epsilon: 1}, T: 4, SampleRate: 0.5, Seed: 7, Clients: []string{"UA", "UB", "UC"}}
	for _, tc := range []struct {
		edit func(*settings)
		want []string
	}{
		{func(s *settings) {}, nil},
		{func(s *settings) { s.T = 5 }, []string{"rounds: stored 4, now 5"}},
		{func(s *settings) { s.Spec.Epsilon, s.Seed = 2, 8 }, []string{"epsilon: stored 1, now 2", "seed: stored 7, now 8"}},
		{func(s *settings) { s.Spec.Method = "bbq" }, []string{`method: stored "temp", now "bbq"`}},
		{func(s *settings) { s.Clients = []string{"UA", "UX", "UC", "UD"} }, []string{"allow-list: stored 3 keys, now 4, the first different is client 1's"}},
		{func(s *settings) { s.Secure = &SecureConfig{Bits: 32} }, []string{`secure aggregation: stored none, now {"neighbours":0,"threshold":0,"bits":32,"noise":""}`}},
	} {
		now := stored
		now.Clients = append([]string(nil), stored.Clients...)
		tc.edit(&now)
		if got := diffSettings(stored, now); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("diff = %q, want %q", got, tc.want)
		}
	}
}
