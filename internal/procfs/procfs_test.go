package procfs

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		wantErr    bool
	}{
		{"plain", "42 (edgeplane) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 30 0", 3 * time.Second, false},
		{"spaces and parentheses in the name", "42 (a) b (c) S 1 42 42 0 -1 0 0 0 0 0 7 3 0 0", 100 * time.Millisecond, false},
		{"no name", "42 edgeplane S", 0, true},
		{"short", "42 (x) S 1 2", 0, true},
		{"not numbers", "42 (x) S 1 42 42 0 -1 0 0 0 0 0 a b 0 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU([]byte(tc.stat))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("parseStatCPU = %v, %v; want %v (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestSelf reads this test process's own figures.
func TestSelf(t *testing.T) {
	rss, err := RSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Fatalf("RSS of this process = %d, %v; want at least 1 MiB", rss, err)
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) { // burn some CPU
	}
	cpu, err := CPUTime(os.Getpid())
	if err != nil || cpu <= 0 {
		t.Fatalf("CPUTime of this process = %v, %v; want > 0", cpu, err)
	}
	if _, err := RSS(-1); err == nil {
		t.Fatal("RSS of pid -1 succeeded")
	}
}

func TestReadIOSelf(t *testing.T) {
	before, err := ReadIO(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "io")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<16)); err != nil {
		t.Fatal(err)
	}
	after, err := ReadIO(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.WChar-before.WChar < 1<<16 {
		t.Errorf("wchar grew by %d after a 64 KiB write, want at least that", after.WChar-before.WChar)
	}
}
