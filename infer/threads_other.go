//go:build !linux

package infer

import "errors"

// backgroundNice is the nice value of a reader at background priority.
const backgroundNice = 19

func gettid() int { return 0 }

// setBackground is not supported outside Linux: the reader keeps normal
// priority.
func setBackground(tid int) error { return errors.ErrUnsupported }

// threadNice is not supported outside Linux.
func threadNice(tid int) (int, error) { return 0, errors.ErrUnsupported }
