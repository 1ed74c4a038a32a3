// Package calibtest makes labelled logits for the tests of the packages
// that calibrate them, as net/http/httptest does requests: synthetic
// models whose miscalibration is known by construction, drawn from a
// caller's random source so that a seed fixes every value.
//
// Package calib's own tests cannot import it (calibtest imports calib)
// and keep their generators.
package calibtest
