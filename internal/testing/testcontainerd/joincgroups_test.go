package testcontainerd

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestJoinCgroups: the wrapped command runs with its arguments intact in
// the process that wrote its pid to every procs file (plain files stand in
// for cgroup.procs), and does not run when a file cannot be written.
func TestJoinCgroups(t *testing.T) {
	dir := t.TempDir()
	procs := []string{filepath.Join(dir, "memory.procs"), filepath.Join(dir, "cpu.procs")}
	out := filepath.Join(dir, "out")
	cmd := joinCgroups(exec.Command("/bin/sh", "-c", `echo "$$|$0|$1" > "$2"`, "a b", "c d", out), procs)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(strings.TrimSpace(string(got)), "|")
	if len(f) != 3 || f[1] != "a b" || f[2] != "c d" {
		t.Fatalf("the command saw %q, want pid|a b|c d", got)
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(b)) != f[0] {
			t.Errorf("%s: %q (%v), want the command's pid %s", p, b, err, f[0])
		}
	}

	ran := filepath.Join(dir, "ran")
	cmd = joinCgroups(exec.Command("/bin/sh", "-c", `touch "$0"`, ran), []string{filepath.Join(dir, "missing", "cgroup.procs")})
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 125 {
		t.Errorf("an unwritable procs file: %v, want exit status 125", err)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the command ran although it could not join the cgroup")
	}
}
