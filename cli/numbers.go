package cli

import (
	"fmt"
	"math"
)

// checkPositive returns an error unless the value v of flag --name is a
// finite number > 0. what names the quantity ("clip norm C") and fix,
// if not empty, says what to do instead ("drop --clip for no clipping").
func checkPositive(name string, v float64, what, fix string) error {
	if v > 0 && !math.IsInf(v, 1) {
		return nil
	}
	if fix != "" {
		fix = "; " + fix
	}
	return fmt.Errorf("--%s is %v: want a finite %s > 0%s", name, v, what, fix)
}

// checkRange returns an error unless the value v of flag --name is in
// [lo, hi]; what names the quantity ("rounds T").
func checkRange(name string, v, lo, hi int, what string) error {
	if v >= lo && v <= hi {
		return nil
	}
	return fmt.Errorf("--%s is %d: want %s from %d to %d", name, v, what, lo, hi)
}
