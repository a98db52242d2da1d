// Package testenv holds the one rule for tests that cannot run everywhere.
//
// A test that needs something of the machine (a tool, a permission, a
// filesystem feature, a host address) calls Require. On a developer's machine
// a missing precondition skips the test with what to install or change; under
// CI (see CI) it fails it, because CI installs everything the suite needs
// (.ci/run) and a skip there would hide a test that never ran.
//
// The only skips allowed under CI are the by-design ones in ByDesign, each
// with its reason: tests opted out of the default run on purpose (their full
// form, or their own make target). `make test` runs the suite through
// hack/gotest, which lists every skipped test with its reason at the end and,
// under CI, fails the run on a skip that is not one of these. testing.Short()
// skips are not listed: `make unit` (-short) runs no integration test by
// design, and CI never passes -short.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// ByDesign is the one list of skips that are not failures under CI, keyed
// by the name tests pass to SkipByDesign.
var ByDesign = map[string]string{
	// make reliability: minutes to hours each; make test runs a short form of
	// every one of these scenarios.
	"reliability-full": "full form of a reliability scenario; runs with EDGEPLANE_RELIABILITY_FULL=1 (make reliability), " +
		"and make test runs its short form",
	// The committed pause images are compared byte for byte with a rebuild,
	// which only the go that made them can reproduce.
	"pause-toolchain": "compares the committed pause images (pkg/pauseimage) with a rebuild from source, which needs the go toolchain they were made with (pkg/pauseimage/goversion.go)",
	// make test-qemu, which .ci/run runs after make test.
	"qemu": "cross-builds linux/arm64 and linux/arm (minutes each on a cold cache); runs with EDGEPLANE_TEST_QEMU=1 (make test-qemu, run by .ci/run)",
	// make bench-network: figures, not a check of behaviour (TestClusterNetwork
	// and the NetworkPolicy tests run the same paths in make test).
	"net-figures": "measures the cluster network figures of docs/NETWORKING.md: two two-node clusters and two idle minutes; " +
		"runs with EDGEPLANE_NET_FIGURES=1 (make bench-network)",
	// Figures of docs/ADDONS.md, not a check of behaviour (TestLocalStorage).
	"local-storage-figures": "measures the idle RSS of a server node with local storage on and off (docs/ADDONS.md): " +
		"four servers idle for minutes each; runs with EDGEPLANE_LOCALSTORAGE_FIGURES=node (under the e2e lock) or =control-plane",
	// make bench-metrics: figures (TestMetricsServer checks the behaviour).
	"metrics-figures": "measures the idle RSS and CPU of the resource metrics part of docs/ADDONS.md: four servers, each idle " +
		"for minutes; runs with EDGEPLANE_METRICS_FIGURES=1 (as nodes; make bench-metrics) or =control-plane",
	// make conformance: the upstream [Conformance] suite, about an hour per
	// datastore (docs/CONFORMANCE.md).
	"conformance": "runs the upstream [Conformance] suite on a two-node cluster, about an hour; " +
		"runs with EDGEPLANE_CONFORMANCE_DIR set to a built cache (make conformance)",
	// Figures of docs/ADDONS.md, "Ingress" (TestIngress checks the behaviour).
	"ingress-footprint": "measures the idle RSS of a server node with the Ingress controller on and off (docs/ADDONS.md): " +
		"two servers idle for minutes each; runs with EDGEPLANE_INGRESS_FOOTPRINT set to an idle duration (e.g. 3m), under the e2e lock",
	// Figures of docs/ADDONS.md's summary table, not a check of behaviour.
	"addon-figures": "measures the idle disk writes, RSS and CPU of a server node with the application add-ons on and off (docs/ADDONS.md): " +
		"about 4 minutes per configuration; runs with EDGEPLANE_ADDON_FIGURES set to a list of configurations (e.g. all,none), under the e2e lock",
	// Figures of docs/NODES.md, "Edge links" (TestNodeBehindNAT checks the behaviour).
	"tunnel-figures": "measures kubectl exec, logs and port-forward times and the agent's RSS with the node tunnel and without (docs/NODES.md, \"Edge links\"): " +
		"a two-node cluster, about 4 minutes; runs with EDGEPLANE_TUNNEL_FIGURES=1 (make bench-tunnel), under the e2e lock",
	// Figures of docs/NODES.md, "Offline: the node's API cache" (TestNodePartition checks the behaviour).
	"apicache-figures": "measures the agent's RSS with the node's API cache and without, its writes idle and during a partition, and an offline restart's time to pods running (docs/NODES.md): " +
		"a two-node cluster, three windows of EDGEPLANE_APICACHE_WINDOW (default 5m); runs with EDGEPLANE_APICACHE_FIGURES=1 (make bench-apicache), under the e2e lock",
	// Figures of docs/PERFORMANCE.md, "An agent's memory" (issue 47's agent target).
	"agent-memory-figures": "measures an agent's VmRSS, RssAnon, RssFile and idle CPU from Ready over a window, the binary dropped from the page cache before each start (docs/PERFORMANCE.md): " +
		"a two-node cluster, one window of EDGEPLANE_AGENT_WINDOW (default 30m) per configuration; runs with EDGEPLANE_AGENT_FIGURES=1 (make bench-agent), under the e2e lock",
}

// CI reports whether the tests run in CI, where a missing precondition is a
// failure: the environment variable CI is set to a true value (IsCI).
func CI() bool { return IsCI(os.Getenv("CI")) }

// IsCI is the rule for the value of CI: CI systems set it to "true"
// (GitHub Actions, GitLab, Travis, CircleCI, Buildkite; .ci/run), "True"
// (AppVeyor), "1", or their own name (Woodpecker), so every non-empty value
// counts except the false ones a person sets to say "not CI": 0, false, no
// and off, in any case. .ci/run applies the same rule.
func IsCI(value string) bool {
	switch strings.ToLower(strings.TrimSpace(value)) {
	case "", "0", "false", "no", "off":
		return false
	}
	return true
}

// SkipByDesign skips t for the listed reason name; an unlisted name fails the
// test, so every by-design skip is in ByDesign.
func SkipByDesign(t testing.TB, name string) {
	t.Helper()
	reason, ok := ByDesign[name]
	if !ok {
		t.Fatalf("testenv: skip %q is not in testenv.ByDesign: list it there with its reason, or make the test run", name)
	}
	t.Skipf("by design (%s): %s", name, reason)
}

// Require skips t (fails it under CI) when err says that a
// precondition does not hold; what names the precondition and how to meet it.
func Require(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if CI() {
		t.Fatalf("precondition missing under CI=%s (a failure, not a skip): %s: %v", os.Getenv("CI"), what, err)
	}
	t.Skipf("precondition missing: %s: %v (under CI this fails)", what, err)
}

// Tool returns the path of the first of names found on the PATH, requiring
// (see Require) that one is; install says how to get it.
func Tool(t testing.TB, install string, names ...string) string {
	t.Helper()
	var err error
	for _, name := range names {
		var path string
		if path, err = exec.LookPath(name); err == nil {
			return path
		}
	}
	Require(t, fmt.Sprintf("%s on the PATH (%s)", strings.Join(names, " or "), install), err)
	return ""
}

// UnprivilegedUser is who runs what root would get wrong: root reads and
// writes regardless of file modes, and PostgreSQL refuses to run as root.
const UnprivilegedUser = "nobody"

// Unprivileged returns the credential of UnprivilegedUser and its uid and
// gid, requiring (see Require) that the user exists.
func Unprivileged(t testing.TB) (cred *syscall.Credential, uid, gid int) {
	t.Helper()
	u, err := user.Lookup(UnprivilegedUser)
	Require(t, fmt.Sprintf("a %q user to run checks that root would pass regardless", UnprivilegedUser), err)
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid
}

// SharedDir makes a directory that UnprivilegedUser can enter and read (0755
// up to the system's temporary directory; t.TempDir's parent is private to
// root), removed when t ends.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "edgeplane-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// rerunEnv marks the copy of a test that AsUnprivileged runs.
const rerunEnv = "EDGEPLANE_TESTENV_UNPRIVILEGED"

// AsUnprivileged makes the test t run as a user that file modes apply to.
// When the test process is not root it returns false and t goes on as is.
// As root it runs this test binary again as UnprivilegedUser, limited to t
// (-test.run), fails t with the copy's output if that copy fails or does not
// run t, and returns true: the caller returns at once.
func AsUnprivileged(t *testing.T) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return false
	}
	if os.Getenv(rerunEnv) != "" {
		t.Fatalf("%s is set but the test runs as root: the unprivileged copy did not drop root", rerunEnv)
	}
	cred, uid, gid := Unprivileged(t)
	dir := SharedDir(t)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, uid, gid); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(self))
	if err := copyFile(self, bin, 0o755); err != nil {
		t.Fatalf("copy the test binary for %s: %v", UnprivilegedUser, err)
	}
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	cmd := exec.Command(bin, "-test.run", strings.Join(pattern, "/"), "-test.count=1", "-test.v")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), rerunEnv+"=1", "TMPDIR="+tmp, "HOME="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s as %s: %v\n%s", t.Name(), UnprivilegedUser, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("%s as %s did not run and pass (skipped or filtered out):\n%s", t.Name(), UnprivilegedUser, out)
	}
	t.Logf("ran as %s: passed", UnprivilegedUser)
	return true
}

func copyFile(from, to string, mode os.FileMode) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, mode)
}
