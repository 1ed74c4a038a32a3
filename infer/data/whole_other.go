//go:build !linux

package data

// mapBytes returns nil: outside Linux, gzip files are decompressed as
// they are read.
func mapBytes(n int, huge bool) []byte { return nil }

// unmapBytes is never called outside Linux.
func unmapBytes(b []byte) {}

// dropBytes is never called outside Linux.
func dropBytes(b []byte) {}
