package data

import "syscall"

// mapBytes returns n bytes of private anonymous memory, outside Go's heap,
// whose pages are committed only when written (MAP_NORESERVE), or nil
// when the system refuses the mapping.
func mapBytes(n int) []byte {
	if n <= 0 {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	// Huge pages, where the system gives them on request, take one page
	// fault per 2 MiB written instead of 512.
	syscall.Madvise(b, syscall.MADV_HUGEPAGE)
	return b
}

// unmapBytes unmaps memory that mapBytes returned.
func unmapBytes(b []byte) {
	if err := syscall.Munmap(b); err != nil {
		panic("data: munmap of a mapBytes mapping: " + err.Error())
	}
}

// dropBytes gives the pages of b, a page-aligned part of a mapBytes
// mapping that will not be read again, back to the system.
func dropBytes(b []byte) {
	if len(b) > 0 {
		syscall.Madvise(b, syscall.MADV_DONTNEED) // advice: a failure only keeps the pages
	}
}
