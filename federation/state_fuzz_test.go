package federation

import (
	"bytes"
	"context"
	"testing"

	"github.com/fedcalib/fedcalib/calib"
)

// FuzzRestore: a server state read back from a coordinator's store,
// whatever its bytes, is refused or restored into the steps of every
// method of the registry (private, so that the ledger is part of it);
// a restored server reports its result without panicking, and its state
// restores again to the same bytes.
func FuzzRestore(f *testing.F) {
	pop, _, _ := federationOf(f, synthSet(300, 3, 5), 4, 0.5, 5)
	r := Rounds{T: 2, SampleRate: 1, Seed: 4}
	fed := FederationOf(context.Background(), pop, 1)
	type stepper struct {
		name string
		s    Stepper
	}
	var steppers []stepper
	for _, m := range calib.Methods() {
		fit, err := Spec{Method: m.Name, Epsilon: 3, Mexp: 3}.Fitter()
		if err != nil {
			f.Fatal(err)
		}
		st := fit.(Stepper)
		steppers = append(steppers, stepper{m.Name, st})
		c, s, err := st.Steps(fed, r)
		if err != nil {
			f.Fatal(err)
		}
		for round := 0; round <= 1; round++ { // seeds: before the first round and after one
			if round == 1 {
				driveRounds(f, c, s, pop, r, 1, 1)
			}
			b, err := s.(StateSaver).State()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, st := range steppers {
			_, s, err := st.s.Steps(fed, r)
			if err != nil {
				t.Fatal(err)
			}
			saver := s.(StateSaver)
			if saver.Restore(b) != nil {
				continue
			}
			s.Result() // an error is allowed, a panic is not
			state, err := saver.State()
			if err != nil {
				t.Fatalf("%s: the restored state does not save: %v", st.name, err)
			}
			_, s2, _ := st.s.Steps(fed, r)
			if err := s2.(StateSaver).Restore(state); err != nil {
				t.Fatalf("%s: a saved state does not restore: %v", st.name, err)
			}
			again, _ := s2.(StateSaver).State()
			if !bytes.Equal(state, again) {
				t.Fatalf("%s: the state changed on a second restore:\n%s\n%s", st.name, state, again)
			}
		}
	})
}
