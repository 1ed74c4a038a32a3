package dp

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalid is wrapped by every error that reports a privacy parameter out
// of its domain (ε ≤ 0, δ ∉ (0, 1), a sampling rate ∉ (0, 1], fewer than one
// round, a clip norm or noise multiplier ≤ 0, ...).
var ErrInvalid = errors.New("invalid privacy parameter")

// ErrBudgetExceeded is wrapped by the error a Ledger returns when a release
// would spend more than its budget.
var ErrBudgetExceeded = errors.New("privacy budget exceeded")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func checkEpsilon(eps float64) error {
	if !(eps > 0) || math.IsInf(eps, 1) {
		return invalidf("epsilon = %v; it must be finite and > 0", eps)
	}
	return nil
}

func checkDelta(delta float64) error {
	if !(delta > 0 && delta < 1) {
		return invalidf("delta = %v; it must be in (0, 1)", delta)
	}
	return nil
}

func checkRho(rho float64) error {
	if !(rho >= 0) {
		return invalidf("rho = %v; it must be ≥ 0", rho)
	}
	return nil
}

func checkRate(q float64) error {
	if !(q > 0 && q <= 1) {
		return invalidf("sample rate = %v; it must be in (0, 1]", q)
	}
	return nil
}

func checkCount(name string, n int) error {
	if n < 1 {
		return invalidf("%s = %d; it must be ≥ 1", name, n)
	}
	return nil
}

func checkMultiplier(z float64) error {
	if !(z > 0) || math.IsInf(z, 1) {
		return invalidf("noise multiplier = %v; it must be finite and > 0", z)
	}
	return nil
}
