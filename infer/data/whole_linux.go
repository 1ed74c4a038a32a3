package data

import "syscall"

// mapBytes returns n bytes of private anonymous memory, outside Go's heap,
// whose pages are committed only when written (MAP_NORESERVE), or nil
// when the system refuses the mapping. With huge, it asks for huge pages
// where the system gives them on request (transparent huge pages in
// madvise mode): one page fault per 2 MiB written instead of 512, for
// memory that will be written in full; a small content in a huge page
// would cost the zeroing of 2 MiB.
func mapBytes(n int, huge bool) []byte {
	if n <= 0 {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	if huge {
		syscall.Madvise(b, syscall.MADV_HUGEPAGE) // advice: a failure only costs time
	}
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
