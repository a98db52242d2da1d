package localstorage

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// TestNodeEvents: a node that cannot make a volume's directory, or whose
// disk has no room for the claim, says so in an event on the claim,
// instead of leaving the pod to wait with nothing said.
func TestNodeEvents(t *testing.T) {
	tests := []struct {
		name   string
		root   func(t *testing.T) string
		reason string
		want   string
	}{
		{
			name: "path under a file",
			root: func(t *testing.T) string {
				file := filepath.Join(t.TempDir(), "file")
				if err := os.WriteFile(file, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(file, "storage")
			},
			reason: ReasonPathNotWritable, want: "Node n1 cannot make the volume's directory: mkdir",
		},
		{
			name: "read-only filesystem",
			root: func(t *testing.T) string {
				dir := mountTmpfs(t, "ro,size=64k")
				return filepath.Join(dir, "storage")
			},
			reason: ReasonPathNotWritable, want: "read-only file system",
		},
		{
			name: "full disk",
			root: func(t *testing.T) string {
				dir := mountTmpfs(t, "size=64k")
				fill(t, dir)
				return filepath.Join(dir, "storage")
			},
			reason: ReasonDiskFull, want: "is full (the claim asks for 1Mi)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			c := startCluster(t, ctx, tt.root(t), "n1")
			if _, err := c.admin.CoreV1().PersistentVolumeClaims("default").Create(ctx, claim("default", "data", ClassName, "n1", nil), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Log(waitEvent(t, ctx, c.admin, "default", "data", tt.reason, tt.want))
		})
	}
}

// mountTmpfs mounts a tmpfs with options on a new directory, unmounted when
// the test ends.
func mountTmpfs(t *testing.T, options string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Require(t, "root, to mount a small tmpfs", errors.New("not root"))
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", options, "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.Require(t, "mount -t tmpfs", errors.New(strings.TrimSpace(string(out))))
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes into dir until its filesystem is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

func TestSpaceShortage(t *testing.T) {
	tests := []struct {
		free    uint64
		request string
		want    string
	}{
		{free: 2 << 20, request: "1Mi", want: ""},
		{free: 1 << 20, request: "1Mi", want: ""},
		{free: 0, request: "1Mi", want: "the disk holding /d is full (the claim asks for 1Mi)"},
		{free: 512 << 10, request: "1Mi", want: "the disk holding /d has 512.0 KiB free, less than the 1Mi the claim asks for"},
		{free: 3 << 29, request: "10Gi", want: "has 1.5 GiB free, less than the 10Gi"},
	}
	for _, tt := range tests {
		got := spaceShortage("/d", tt.free, resource.MustParse(tt.request))
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("spaceShortage(%d, %s) = %q, want %q", tt.free, tt.request, got, tt.want)
		}
	}
}

// TestNodeRetries: a volume that has failed for a long time (a disk left
// read-only or full for hours) is retried within retryMax of the path
// being fixed, and a failing volume is not retried (an event each time)
// more than a few times a second.
func TestNodeRetries(t *testing.T) {
	tests := []struct {
		failures int
		min, max time.Duration
	}{
		{failures: 1, min: 100 * time.Millisecond, max: 100 * time.Millisecond},
		{failures: 5, min: 1600 * time.Millisecond, max: 1600 * time.Millisecond},
		{failures: 20, min: retryMax, max: retryMax},
		{failures: 1000, min: retryMax, max: retryMax},
	}
	for _, tt := range tests {
		r := nodeRetries()
		var last time.Duration
		for range tt.failures {
			last = r.When("pvc-1")
		}
		if last < tt.min || last > tt.max {
			t.Errorf("after %d failures the next retry is in %v, want %v to %v", tt.failures, last, tt.min, tt.max)
		}
	}
}
