// Package pagecache drops files from the page cache, so that a benchmark's
// start reads its binaries by page faults, as after a boot, and checks that
// the drop took.
package pagecache

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// How much of a Go binary's file its process maps depends on how the file
// entered the page cache: one touch maps the whole folio the page sits in,
// and a file read in sequence (cp, sha256sum, cat) sits there in folios of up
// to 2 MiB, one written by the linker or read by page faults in smaller ones.
// The same edgeplane binary had 56 to 132 MiB of file-backed RSS 60 s after
// ready, anonymous RSS unchanged (docs/PERFORMANCE.md). So that every
// configuration's memory is read from the same state, the benchmark drops
// each binary's pages from the page cache before the configuration's first
// cold start, as a boot does: the processes then read the file by page
// faults.

// Drop writes back and drops the cached pages of each file and
// returns how many bytes of them were cached before. It checks that the drop
// took: a file whose pages stay (tmpfs, where the pages are the file, or one
// mapped by a running process) is an error, since the cold starts would then
// not be cold.
func Drop(paths []string) (int64, error) {
	var cached int64
	for _, p := range paths {
		n, err := dropFile(p)
		cached += n
		if err != nil {
			return cached, err
		}
	}
	return cached, nil
}

// maxResidentAfterDrop is the share of a file that may stay cached after the
// drop (pages being read back meanwhile by something else).
const maxResidentAfterDrop = 0.05

func dropFile(p string) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	before, err := Resident(f)
	// Dirty pages (a binary just linked) are not dropped: write them first.
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	if err != nil {
		return before, fmt.Errorf("dropping %s from the page cache: %w", p, err)
	}
	after, err := Resident(f)
	if err != nil {
		return before, err
	}
	fi, err := f.Stat()
	if err != nil {
		return before, err
	}
	if float64(after) > maxResidentAfterDrop*float64(fi.Size()) {
		return before, fmt.Errorf("%s: %d of its %d bytes still in the page cache after dropping it (on tmpfs, or mapped by a running process?): "+
			"the cold start would not be cold; put the binaries on a disk filesystem",
			p, after, fi.Size())
	}
	return before, nil
}

// Resident is how much of the open file f is in the page cache
// (mincore over a read-only mapping of it).
func Resident(f *os.File) (int64, error) {
	path := f.Name()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return 0, err
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mapping %s: %w", path, err)
	}
	defer unix.Munmap(data)
	page := int64(os.Getpagesize())
	vec := make([]byte, (fi.Size()+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	var n int64
	for _, v := range vec {
		if v&1 != 0 {
			n += page
		}
	}
	return n, nil
}
