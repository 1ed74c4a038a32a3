package federation

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestGroupByClient checks the counting sort against a plain grouping,
// with dense ids (counted in a slice) and sparse ones (large ids, counted
// in a map): the same users in id order, each with its rows in order.
func TestGroupByClient(t *testing.T) {
	for _, tc := range []struct {
		name  string
		maxID int32
	}{{"dense", 30}, {"sparse", 1 << 30}} {
		rng := rand.New(rand.NewPCG(7, uint64(tc.maxID)))
		ids := make([]int32, 12)
		for k := range ids {
			ids[k] = rng.Int32N(tc.maxID)
		}
		client := make([]int32, 500)
		want := map[int32][]int32{}
		for i := range client {
			client[i] = ids[rng.IntN(len(ids))]
			want[client[i]] = append(want[client[i]], int32(i))
		}
		users, err := groupByClient(client, nil)
		if err != nil {
			t.Fatal(err)
		}
		order := slices.Sorted(maps.Keys(want))
		if len(users) != len(order) {
			t.Fatalf("%s: %d users, want %d", tc.name, len(users), len(order))
		}
		for k, u := range users {
			if u.id != int64(order[k]) || !slices.Equal(u.rows, want[order[k]]) {
				t.Errorf("%s: user %d is %d with rows %v, want %d with %v", tc.name, k, u.id, u.rows, order[k], want[order[k]])
			}
			if cap(u.rows) != len(u.rows) {
				t.Errorf("%s: user %d's rows have room to grow into the next user's", tc.name, k)
			}
		}
	}
	if _, err := groupByClient([]int32{0, -1}, nil); err == nil {
		t.Error("no error for a negative id")
	}
}
