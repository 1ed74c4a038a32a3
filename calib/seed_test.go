package calib

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSeedJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Seed
	}{
		{`0`, 0},
		{`5`, 5},
		{`18446744073709551615`, 1<<64 - 1},
		// Old files: a signed seed reads as the same bits.
		{`-1`, 1<<64 - 1},
		{`-9223372036854775808`, 1 << 63},
	} {
		var p Provenance
		if err := json.Unmarshal([]byte(`{"seed": `+tc.in+`}`), &p); err != nil || p.Seed != tc.want {
			t.Errorf("seed %s: read %d, %v; want %d", tc.in, p.Seed, err, tc.want)
		}
	}
	for _, in := range []string{`1.5`, `"7"`, `18446744073709551616`, `-9223372036854775809`} {
		var p Provenance
		if err := json.Unmarshal([]byte(`{"seed": `+in+`}`), &p); err == nil {
			t.Errorf("seed %s: read %d, want an error", in, p.Seed)
		}
	}
	b, err := json.Marshal(Provenance{Seed: 1<<64 - 1})
	if err != nil || !strings.Contains(string(b), `"seed":18446744073709551615`) {
		t.Errorf("marshal: %s, %v", b, err)
	}
}
