//go:build !linux

package infer

import "errors"

func gettid() int { return 0 }

// setBackground is not supported outside Linux: the reader keeps normal
// priority.
func setBackground(tid int) error { return errors.ErrUnsupported }

// schedPolicy is not supported outside Linux.
func schedPolicy(tid int) (int, error) { return 0, errors.ErrUnsupported }
