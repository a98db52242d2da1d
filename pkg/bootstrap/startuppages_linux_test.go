package bootstrap

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

func TestReadOnlyMappings(t *testing.T) {
	const exe = "/usr/local/bin/edgeplane"
	maps := strings.Join([]string{
		"00400000-048c7000 r-xp 00000000 08:01 4242 " + exe,
		"048c7000-099dd000 r--p 044c7000 08:01 4242 " + exe,
		"099dd000-09b56000 rw-p 095dd000 08:01 4242 " + exe,
		"09b56000-09c00000 rw-p 00000000 00:00 0 ",
		"7f0000000000-7f0000100000 r--s 00000000 08:01 777 /var/lib/edgeplane/etcd/member/snap/db",
		"7f0000100000-7f0000200000 r--p 00000000 08:01 4243 /usr/local/bin/edgeplane",
		"7f0000200000-7f0000300000 r--p 00000000 08:01 4242 /usr/local/bin/edgeplane-old",
		"7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]",
	}, "\n")
	for _, tc := range []struct {
		name string
		path string
		ino  uint64
		want []mapping
	}{
		{"code and read-only data of the executable, not its data or other files", exe, 4242,
			[]mapping{{0x400000, 0x48c7000}, {0x48c7000, 0x99dd000}}},
		{"inode unknown: the path alone", exe, 0,
			[]mapping{{0x400000, 0x48c7000}, {0x48c7000, 0x99dd000}, {0x7f0000100000, 0x7f0000200000}}},
		{"a replaced binary's path", exe + " (deleted)", 4242, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readOnlyMappings([]byte(maps), tc.path, tc.ino)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("readOnlyMappings = %x, want %x", got, tc.want)
			}
		})
	}

	deleted := "00400000-048c7000 r-xp 00000000 08:01 4242 " + exe + " (deleted)"
	got, err := readOnlyMappings([]byte(deleted), exe+" (deleted)", 4242)
	if err != nil || len(got) != 1 {
		t.Fatalf("a binary replaced on disk: %x, %v; want its one mapping", got, err)
	}
	if _, err := readOnlyMappings([]byte("zz r-xp 0 08:01 4242 "+exe), exe, 4242); err == nil {
		t.Fatal("a malformed range was accepted")
	}
}

// dataSegment lives in the binary's writable data: releasing the read-only
// mappings must not reset it to the value in the file.
var dataSegment = [4]int{1, 2, 3, 4}

func TestReleaseStartupPages(t *testing.T) {
	dataSegment[2] = 42
	rssFile := func() int64 {
		v, err := procfs.StatusBytes(os.Getpid(), "RssFile")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := rssFile()
	released, err := releaseStartupPages()
	after := rssFile()
	if err != nil {
		t.Fatal(err)
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
	if got, err := readOnlyMappings([]byte("1000-2000 r-xp 0 08:01 1 /x"), "/x", 1); err != nil || len(got) != 1 {
		t.Fatalf("after the release: %v, %v", got, err)
	}
	t.Logf("released %d MiB of mappings; file-backed RSS %d -> %d MiB", released>>20, before>>20, after>>20)
}
