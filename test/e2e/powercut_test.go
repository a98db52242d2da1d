package e2e

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/testing/powercut"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// Power cuts (issue 31): the crash test's writers and ledger with edgeplane's
// data dir on a FUSE filesystem (internal/testing/powercut) that drops every byte not
// fsynced when the power is cut. Each cycle SIGKILLs the server at a seeded
// random moment, cuts, unmounts and remounts, and restarts on what the
// "disk" kept: every acknowledged write must be there, and every file
// edgeplane writes itself must be whole.

// powerCutPlan is the crash plan with the power-cut cycle counts: 2 per
// datastore in CI, 50 in the full form (EDGEPLANE_RELIABILITY_FULL=1),
// EDGEPLANE_POWERCUT_CYCLES to choose.
func powerCutPlan(t *testing.T) crashPlan {
	t.Helper()
	p := crashPlanFromEnv(t)
	// Every write goes through FUSE, and SQLite syncs each commit: kine on
	// SQLite acknowledges 30-130 writes a second here on a loaded machine
	// (etcd 100-300), so the writers run at least 1.5 s before the cut for
	// the per-cycle floors of acknowledged writes to hold (the full run's
	// slowest cycle: 15 writes in 521 ms).
	p.cycles, p.minRun, p.maxRun = 2, 1500*time.Millisecond, 2500*time.Millisecond
	if p.full {
		p.cycles, p.maxRun = 50, 4*time.Second
	}
	if s := os.Getenv("EDGEPLANE_POWERCUT_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			t.Fatalf("EDGEPLANE_POWERCUT_CYCLES=%q: want a number of cycles from 1 to 1000", s)
		}
		p.cycles = n
	}
	return p
}

// TestPowerCut runs power-cut/restart cycles under concurrent writers on
// both datastores.
func TestPowerCut(t *testing.T) {
	if testing.Short() {
		t.Skip("cuts the power under the real server")
	}
	parallelSubtests(t)
	testenv.Require(t, "root and /dev/fuse (the power-cut filesystem mounts FUSE directly)", powercut.Available())
	plan := powerCutPlan(t)
	perDatastore(t, 25*time.Second, func(t *testing.T, ds string) string { return powerCutCycles(t, plan, ds) })
}

func powerCutCycles(t *testing.T, plan crashPlan, ds string) string {
	backing, mnt := t.TempDir(), t.TempDir()
	pc, err := powercut.Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	// pc is nil between an unmount and the remount; the server's own cleanup
	// (registered later) kills it before this runs.
	t.Cleanup(func() {
		if pc == nil {
			return
		}
		if err := pc.Unmount(); err != nil {
			t.Error(err)
		}
	})
	dir := filepath.Join(mnt, "data")
	var args []string
	if ds == "sqlite" {
		// EDGEPLANE_POWERCUT_SQLITE_SYNC=normal measures the fast opt-out:
		// the test then fails with what that mode loses.
		if m := os.Getenv("EDGEPLANE_POWERCUT_SQLITE_SYNC"); m != "" {
			args = append(args, "--sqlite-synchronous="+m)
			t.Logf("sqlite with --sqlite-synchronous=%s", m)
		}
	}
	var dropped int
	v := crashVariant{
		name: "power-cut",
		verb: "power cut",
		salt: 31,
		args: args,
		afterKill: func(t *testing.T, cycle int) {
			st, err := pc.Cut()
			if err != nil {
				t.Fatalf("cycle %d: cut: %v", cycle, err)
			}
			dropped += st.DroppedFiles
			slices.Sort(st.DroppedPaths)
			t.Logf("%s cycle %d: cut after %d writes and %d syncs: %d files lost unsynced changes: %s",
				ds, cycle, st.Writes, st.Syncs, st.DroppedFiles, strings.Join(st.DroppedPaths, ", "))
			err = pc.Unmount()
			pc = nil
			if err != nil {
				t.Fatalf("cycle %d: %v", cycle, err)
			}
			if pc, err = powercut.Mount(backing, mnt); err != nil {
				t.Fatalf("cycle %d: remount: %v", cycle, err)
			}
			// What the disk kept, before the restart rewrites anything.
			for _, p := range checkDataDirFiles(dir) {
				t.Errorf("%s cycle %d, after the cut: %s", ds, cycle, p)
			}
		},
	}
	sum := crashLoop(t, plan, ds, dir, v)
	return fmt.Sprintf("%s; %d files had unsynced changes at the cuts", sum, dropped)
}

// checkDataDirFiles returns what is wrong with the files edgeplane writes
// itself under dir: empty or torn certificates, keys, kubeconfigs, tokens,
// YAML and JSON. The datastore's own files (SQLite's, etcd's member dir) are
// checked by the restart opening them.
func checkDataDirFiles(dir string) []string {
	var problems []string
	bad := func(path, format string, args ...any) {
		rel, _ := filepath.Rel(dir, path)
		problems = append(problems, rel+": "+fmt.Sprintf(format, args...))
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			if rel == filepath.Join("db", "etcd", "member") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasPrefix(rel, filepath.Join("db", "state.db")) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			bad(path, "%v", err)
			return nil
		}
		name := d.Name()
		switch {
		case strings.HasPrefix(name, "."):
			return nil // a leftover temp file of an interrupted atomic write: harmless
		case name == "edgeplane.lock" || name == "edgeplane-bootstrapped":
			return nil // their presence is what counts (the lock's pid is advisory)
		}
		if len(data) == 0 {
			bad(path, "empty after the power cut (written without fsync, or torn)")
			return nil
		}
		switch ext := filepath.Ext(name); {
		case ext == ".crt" || ext == ".pem" || ext == ".key" || ext == ".pub":
			if msg := checkPEM(data); msg != "" {
				bad(path, "%s", msg)
			}
		case ext == ".kubeconfig" || strings.Contains(name, "kubeconfig"):
			cfg, err := clientcmd.Load(data)
			if err != nil || len(cfg.Clusters) == 0 || len(cfg.AuthInfos) == 0 {
				bad(path, "not a whole kubeconfig: %v", err)
			}
		case ext == ".yaml" || ext == ".yml" || ext == ".json":
			var v any
			if err := yaml.Unmarshal(data, &v); err != nil || v == nil {
				bad(path, "not whole YAML/JSON: %v", err)
			}
		case name == "token":
			if !bytes.HasPrefix(data, []byte("K10")) || bytes.Count(data, []byte("::")) != 1 || !bytes.HasSuffix(data, []byte("\n")) {
				bad(path, "not a whole join token (%d bytes)", len(data))
			}
		case name == "node-token" || ext == ".endpoint" || ext == ".name":
			if !bytes.HasSuffix(data, []byte("\n")) {
				bad(path, "torn: no final newline (%d bytes)", len(data))
			}
		}
		return nil
	})
	if err != nil {
		problems = append(problems, "walk: "+err.Error())
	}
	return problems
}

// checkPEM reports a PEM file that is not whole: no block, trailing bytes,
// or a certificate or key that does not parse.
func checkPEM(data []byte) string {
	blocks := 0
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		blocks++
		var err error
		switch b.Type {
		case "CERTIFICATE":
			_, err = x509.ParseCertificate(b.Bytes)
		case "PRIVATE KEY":
			_, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			_, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			_, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		case "PUBLIC KEY":
			_, err = x509.ParsePKIXPublicKey(b.Bytes)
		}
		if err != nil {
			return fmt.Sprintf("PEM block %d (%s) does not parse: %v", blocks, b.Type, err)
		}
	}
	if blocks == 0 {
		return fmt.Sprintf("no PEM block in %d bytes", len(data))
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return fmt.Sprintf("%d bytes after the last PEM block", len(rest))
	}
	return ""
}
