package bootstrap

import (
	"bytes"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/pagecache"
	"github.com/edgeplane/edgeplane/internal/procfs"
)

func TestReadOnlyMappings(t *testing.T) {
	const exe = "/usr/local/bin/edgeplane"
	maps := strings.Join([]string{
		"00400000-048c7000 r-xp 00000000 08:01 4242 " + exe,
		"048c7000-099dd000 r--p 044c7000 08:01 4242 " + exe,
		"099dd000-09b56000 rw-p 095dd000 08:01 4242 " + exe,
		"09b56000-09c00000 rw-p 00000000 00:00 0 ",
		"e0000000-e0100000 r--s 00000000 08:01 777 /var/lib/edgeplane/etcd/member/snap/db",
		"e0100000-e0200000 r--p 00000000 08:01 4243 /usr/local/bin/edgeplane",
		"e0200000-e0300000 r--p 00000000 08:01 4242 /usr/local/bin/edgeplane-old",
		"7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]",
	}, "\n")
	// The segments of that binary: code, read-only data, writable data.
	segments := fileSegments{
		readOnly: []mapping{{0, 0x44c7000}, {0x44c7000, 0x95dd000}},
		writable: []mapping{{0x95dd000, 0x9800000}},
	}
	for _, tc := range []struct {
		name string
		path string
		ino  uint64
		want []mapping
	}{
		{"code and read-only data of the executable, not its data or other files", exe, 4242,
			[]mapping{{0x400000, 0x48c7000}, {0x48c7000, 0x99dd000}}},
		{"inode unknown: the path alone", exe, 0,
			[]mapping{{0x400000, 0x48c7000}, {0x48c7000, 0x99dd000}, {0xe0100000, 0xe0200000}}},
		{"a replaced binary's path", exe + " (deleted)", 4242, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readOnlyMappings([]byte(maps), tc.path, tc.ino, segments)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("readOnlyMappings = %x, want %x", got, tc.want)
			}
		})
	}

	deleted := "00400000-048c7000 r-xp 00000000 08:01 4242 " + exe + " (deleted)"
	got, err := readOnlyMappings([]byte(deleted), exe+" (deleted)", 4242, segments)
	if err != nil || len(got) != 1 {
		t.Fatalf("a binary replaced on disk: %x, %v; want its one mapping", got, err)
	}
	if _, err := readOnlyMappings([]byte("zz r-xp 0 08:01 4242 "+exe), exe, 4242, segments); err == nil {
		t.Fatal("a malformed range was accepted")
	}

	// A binary built with cgo (dynamically linked) or as PIE: the loader
	// relocates the start of the writable segment (RELRO: GOT, .data.rel.ro)
	// and then makes it read-only, so it shows as a read-only mapping. Its
	// pages differ from the file: dropping them would reset the pointers.
	relro := strings.Join([]string{
		"00400000-02902000 r--p 00000000 08:01 4242 " + exe,
		"02902000-070f3000 r-xp 02502000 08:01 4242 " + exe,
		"070f3000-0c5dd000 r--p 06cf3000 08:01 4242 " + exe,
		"0c5dd000-0c5e0000 r--p 0c1dd000 08:01 4242 " + exe,
		"0c5e0000-0c761000 rw-p 0c1e0000 08:01 4242 " + exe,
	}, "\n")
	relroSegments := fileSegments{
		readOnly: []mapping{{0, 0x2502000}, {0x2502000, 0x6cf3000}, {0x6cf3000, 0xc1dd000}},
		writable: []mapping{{0xc1dd000, 0xc361000}, {0xc1dd000, 0xc1e0000}},
	}
	got, err = readOnlyMappings([]byte(relro), exe, 4242, relroSegments)
	want := []mapping{{0x400000, 0x2902000}, {0x2902000, 0x70f3000}, {0x70f3000, 0xc5dd000}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("with a relocated read-only part of the data segment: %x, %v; want %x", got, err, want)
	}
}

// dataSegment lives in the binary's writable data: releasing the read-only
// mappings must not reset it to the value in the file.
var dataSegment = [4]int{1, 2, 3, 4}

func TestReleaseStartupPages(t *testing.T) {
	dataSegment[2] = 42
	// Every mapping to be released must hold exactly what the file holds at
	// its offset: the kernel refills a dropped page from the file, so a page
	// the process (or the dynamic loader) changed would come back different.
	assertMappingsMatchFile(t)
	rssFile := func() int64 {
		v, err := procfs.StatusBytes(os.Getpid(), "RssFile")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The binary as installed: written back, all of it in the page cache.
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	if err := exe.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, exe); err != nil {
		t.Fatal(err)
	}
	cachedBefore, err := pagecache.Resident(exe)
	if err != nil {
		t.Fatal(err)
	}
	before := rssFile()
	released, err := releaseStartupPages()
	after := rssFile()
	if err != nil {
		t.Fatal(err)
	}
	cachedAfter, err := pagecache.Resident(exe)
	if err != nil {
		t.Fatal(err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(exe.Fd()), &fs); err != nil {
		t.Fatal(err)
	}
	// On tmpfs the pages are the file: they cannot be dropped.
	if fs.Type != unix.TMPFS_MAGIC && cachedAfter > cachedBefore/2 {
		t.Errorf("the executable's pages in the page cache: %d MiB before the release, %d MiB after: want its unmapped pages dropped", cachedBefore>>20, cachedAfter>>20)
	}
	if notRandom := mappingsWithoutRandomRead(t); len(notRandom) > 0 {
		t.Errorf("released mappings without MADV_RANDOM (VmFlags rr): %s", notRandom)
	}
	if released == 0 {
		t.Fatal("no mapping of the test binary was released")
	}
	if after >= before {
		t.Fatalf("file-backed RSS %d KiB before, %d KiB after: want it lower", before>>10, after>>10)
	}
	if dataSegment != [4]int{1, 2, 42, 4} {
		t.Fatalf("the data segment changed: %v", dataSegment)
	}
	// The released code runs again (it faults back in from the page cache).
	if got, err := readOnlyMappings([]byte("1000-2000 r-xp 0 08:01 1 /x"), "/x", 1, fileSegments{readOnly: []mapping{{0, 0x1000}}}); err != nil || len(got) != 1 {
		t.Fatalf("after the release: %v, %v", got, err)
	}
	t.Logf("released %d MiB of mappings; file-backed RSS %d -> %d MiB; the executable in the page cache %d -> %d MiB", released>>20, before>>20, after>>20, cachedBefore>>20, cachedAfter>>20)
}

// mappingsWithoutRandomRead lists the executable's read-only mappings (those
// releaseStartupPages releases) whose VmFlags in /proc/self/smaps lack rr
// (MADV_RANDOM).
func mappingsWithoutRandomRead(t *testing.T) []string {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	segments, err := readOnlySegments("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var header string // the mapping's line, while it is one of the executable's read-only ones
	for _, line := range strings.Split(string(smaps), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			header = ""
			if got, err := readOnlyMappings([]byte(line), exe, 0, segments); err == nil && len(got) == 1 {
				header = line
			}
			continue
		}
		if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok && header != "" && !slices.Contains(strings.Fields(flags), "rr") {
			out = append(out, header)
		}
	}
	return out
}

// assertMappingsMatchFile compares the memory of each mapping
// releaseStartupPages would drop with the executable's bytes at the
// mapping's file offset.
func assertMappingsMatchFile(t *testing.T) {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	segments, err := readOnlySegments("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := readOnlyMappings(maps, exe, fi.Sys().(*syscall.Stat_t).Ino, segments)
	if err != nil {
		t.Fatal(err)
	}
	offsets := map[uintptr]int64{} // mapping start -> file offset
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		lo, _, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		off, err2 := strconv.ParseInt(f[2], 16, 64)
		if err1 == nil && err2 == nil {
			offsets[uintptr(start)] = off
		}
	}
	file, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	const chunk = 1 << 20
	buf, got := make([]byte, chunk), make([]byte, chunk)
	for _, r := range ranges {
		off := offsets[r.start]
		for p := r.start; p < r.end; p += chunk {
			n := min(uintptr(chunk), r.end-p)
			if _, err := file.ReadAt(buf[:n], off+int64(p-r.start)); err != nil {
				t.Fatalf("reading the executable at %#x: %v", off+int64(p-r.start), err)
			}
			if _, err := mem.ReadAt(got[:n], int64(p)); err != nil {
				t.Fatalf("reading this process's memory at %#x: %v", p, err)
			}
			if !bytes.Equal(got[:n], buf[:n]) {
				t.Fatalf("mapping %#x-%#x differs from the file at offset %#x: releasing it would lose what was written there", r.start, r.end, off)
			}
		}
	}
}
