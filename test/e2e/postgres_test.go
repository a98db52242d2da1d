package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// pgUser runs PostgreSQL when the tests run as root: postgres refuses root.
const pgUser = "nobody"

// startPostgres runs a throwaway PostgreSQL (Debian's postgresql package:
// /usr/lib/postgresql/<v>/bin) on a loopback port and returns a kine DSN for
// database db. It skips the test when PostgreSQL is not installed.
func startPostgres(t *testing.T, db string) string {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		t.Skip("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb): apt-get install -y postgresql")
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
		u, err := user.Lookup(pgUser)
		if err != nil {
			t.Skipf("running as root and no %q user for PostgreSQL: %v", pgUser, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
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
