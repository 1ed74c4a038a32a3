//go:build !unix

package network

import "os"

// flock does not lock on systems without flock: the store is not
// protected against a second coordinator there.
func flock(*os.File) error { return nil }
