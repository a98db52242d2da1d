package bootstrap

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// releaseStartupPages unmaps every page of the executable's read-only
// mappings (code, read-only data, the function tables) from this process with
// madvise(MADV_DONTNEED). The pages stay in the page cache: the ones still in
// use are mapped again on their next touch (a minor fault), the ones only
// start-up used (package init, building the OpenAPI documents and the API
// routes) stay unmapped, where the kernel reclaims them before mapped
// executable pages. The writable data segment is not touched: dropping it
// would lose the process's changes. It returns the bytes of the mappings it
// released.
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
	ranges, err := readOnlyMappings(maps, exe, ino)
	if err != nil {
		return 0, err
	}
	var released uint64
	for _, r := range ranges {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, r.start, r.end-r.start, syscall.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("madvise(MADV_DONTNEED) %#x-%#x: %w", r.start, r.end, errno)
		}
		released += uint64(r.end - r.start)
	}
	return released, nil
}

type mapping struct{ start, end uintptr }

// readOnlyMappings picks from /proc/self/maps the private mappings of path
// (inode ino; 0 = any) that are not writable.
// A line is "start-end perms offset dev inode path".
func readOnlyMappings(maps []byte, path string, ino uint64) ([]mapping, error) {
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
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("unexpected range in /proc/self/maps: %q", f[0])
		}
		out = append(out, mapping{uintptr(start), uintptr(end)})
	}
	return out, sc.Err()
}
