package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// startPostgres runs a throwaway PostgreSQL (Debian's postgresql package:
// /usr/lib/postgresql/<v>/bin) on a loopback port and returns a kine DSN for
// database db. Without PostgreSQL installed it skips the test (fails it under
// CI: see testenv.Require); as root it runs PostgreSQL as
// testenv.UnprivilegedUser, since postgres refuses root.
func startPostgres(t *testing.T, db string) string {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		testenv.Require(t, "PostgreSQL server binaries (apt-get install -y postgresql)",
			errors.New("no /usr/lib/postgresql/*/bin/initdb"))
	}
	bin := filepath.Dir(bins[len(bins)-1])

	// Not t.TempDir: its parent is private to root, and postgres runs as pgUser.
	dir, err := os.MkdirTemp("", "edgeplane-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		var uid, gid int
		cred, uid, gid = testenv.Unprivileged(t)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Fatalf("%s %v: %v\n%s\n%s", name, args, err, out, log)
		}
	}
	data := filepath.Join(dir, "data")
	run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	port := freePort(t)
	run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-t", "60",
		"-o", fmt.Sprintf("-h 127.0.0.1 -p %s -k %s -c fsync=off", port, dir), "start")
	t.Cleanup(func() { run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop") })
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%s/%s?sslmode=disable", port, db)
}
