package bootstrap

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// releaseStartupPages unmaps every page of the executable's read-only
// mappings (code, read-only data, the function tables) from this process with
// madvise(MADV_DONTNEED), marks those mappings MADV_RANDOM and drops the
// executable's pages that no process maps from the page cache
// (posix_fadvise(POSIX_FADV_DONTNEED)). The ones still in use are read again
// on their next touch, one page each (MADV_RANDOM: no read-ahead around a
// fault); the ones only start-up used (package init, building the OpenAPI
// documents and the API routes, the first lists and syncs) stay out of
// memory. Without the drop, a fault also maps the cached pages around the one
// touched (the kernel's fault-around), and read-ahead brings in more: an
// agent's file-backed RSS settled at ~59 MiB instead of ~35
// (docs/PERFORMANCE.md, "An agent's memory"). Another process running the
// same binary keeps the pages it maps. The writable data segment is not
// touched: dropping it would lose the process's changes. Nor is the part of
// it that the dynamic loader makes read-only after relocating it (RELRO: the
// GOT, .data.rel.ro) in a binary built with cgo or as PIE: dropping it would
// put back the file's unrelocated pointers. Only mappings inside the ELF's
// read-only loadable segments are released. It returns the bytes of the
// mappings it released.
func releaseStartupPages() (uint64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("finding the executable: %w", err)
	}
	var ino uint64
	if fi, err := os.Stat("/proc/self/exe"); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("reading the process's mappings: %w", err)
	}
	segments, err := readOnlySegments("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	ranges, err := readOnlyMappings(maps, exe, ino, segments)
	if err != nil {
		return 0, err
	}
	var released uint64
	for _, r := range ranges {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, r.start, r.end-r.start, syscall.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("madvise(MADV_DONTNEED) %#x-%#x: %w", r.start, r.end, errno)
		}
		released += uint64(r.end - r.start)
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, r.start, r.end-r.start, syscall.MADV_RANDOM); errno != 0 {
			return released, fmt.Errorf("madvise(MADV_RANDOM) %#x-%#x: %w", r.start, r.end, errno)
		}
	}
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return released, fmt.Errorf("opening the executable: %w", err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return released, fmt.Errorf("dropping the executable's unmapped pages from the page cache: %w", err)
	}
	return released, nil
}

type mapping struct{ start, end uintptr }

// fileSegments are the page-rounded file ranges of an ELF's loadable
// segments: the ones the program never writes and the writable ones.
type fileSegments struct{ readOnly, writable []mapping }

// contain reports whether the file range [off, off+size) lies in a read-only
// segment and overlaps no writable one.
func (s fileSegments) contain(off, size uintptr) bool {
	end := off + size
	for _, w := range s.writable {
		if off < w.end && w.start < end {
			return false
		}
	}
	for _, r := range s.readOnly {
		if r.start <= off && end <= r.end {
			return true
		}
	}
	return false
}

// readOnlySegments reads the program headers of the ELF file at path.
func readOnlySegments(path string) (fileSegments, error) {
	f, err := elf.Open(path)
	if err != nil {
		return fileSegments{}, fmt.Errorf("reading the executable's program headers: %w", err)
	}
	defer f.Close()
	page := uint64(os.Getpagesize())
	var s fileSegments
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD && p.Type != elf.PT_GNU_RELRO {
			continue
		}
		r := mapping{uintptr(p.Off &^ (page - 1)), uintptr((p.Off + p.Filesz + page - 1) &^ (page - 1))}
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_W == 0 {
			s.readOnly = append(s.readOnly, r)
		} else {
			s.writable = append(s.writable, r)
		}
	}
	return s, nil
}

// readOnlyMappings picks from /proc/self/maps the private mappings of path
// (inode ino; 0 = any) that are not writable and whose file range lies in the
// executable's read-only segments.
// A line is "start-end perms offset dev inode path".
func readOnlyMappings(maps []byte, path string, ino uint64, segments fileSegments) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || strings.Join(f[5:], " ") != path {
			continue
		}
		perms := f[1]
		if len(perms) != 4 || perms[0] != 'r' || perms[1] == 'w' || perms[3] != 'p' {
			continue
		}
		if ino != 0 {
			if n, err := strconv.ParseUint(f[4], 10, 64); err != nil || n != ino {
				continue
			}
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("unexpected line in /proc/self/maps: %q", sc.Text())
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil || end <= start {
			return nil, fmt.Errorf("unexpected range in /proc/self/maps: %q", sc.Text())
		}
		if !segments.contain(uintptr(off), uintptr(end-start)) {
			continue
		}
		out = append(out, mapping{uintptr(start), uintptr(end)})
	}
	return out, sc.Err()
}
