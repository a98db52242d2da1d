package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Phase is one ginkgo run of the suite.
type Phase struct {
	// Name is "parallel" or "serial".
	Name string
	// LabelFilter selects the specs (Ginkgo label filter).
	LabelFilter string
	// Procs is how many ginkgo processes run specs at once.
	Procs int
	// Timeout bounds the whole phase.
	Timeout time.Duration
}

// notSuite leaves out what the conformance run excludes, as the issue and
// upstream's conformance runs do: disruptive, flaky and feature-gated specs.
const notSuite = " && !Disruptive && !Flaky && !/^Feature:/"

// Phases are the [Conformance] specs, first those that may run in parallel
// (two processes on these two-core machines), then the [Serial] ones.
var Phases = []Phase{
	{Name: "parallel", LabelFilter: "Conformance && !Serial" + notSuite, Procs: 2, Timeout: 3 * time.Hour},
	{Name: "serial", LabelFilter: "Conformance && Serial" + notSuite, Procs: 1, Timeout: 2 * time.Hour},
}

// Suite is one run of the upstream suite against a cluster.
type Suite struct {
	Artifacts
	// Kubeconfig reaches the cluster from where the suite runs.
	Kubeconfig string
	// OutDir gets one directory per phase: the JUnit report, the log.
	OutDir string
	// Netns, when set, is the network namespace (under /run/netns) to run
	// the suite in (nsenter --net: the mount namespace stays the host's).
	Netns string
	// Focus, when set, narrows every phase to the specs whose text
	// matches it (a regular expression): for trying a few specs.
	Focus string
	// DryRun lists the specs instead of running them.
	DryRun bool
}

// PhaseDir is where a phase's report and log go.
func (s Suite) PhaseDir(p Phase) string { return filepath.Join(s.OutDir, p.Name) }

// Command is the ginkgo command line of phase p: ginkgo runs the
// precompiled e2e.test in p.Procs processes; the flags after "--" are
// e2e.test's own.
func (s Suite) Command(ctx context.Context, p Phase) (*exec.Cmd, error) {
	dir := s.PhaseDir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{
		"--procs=" + strconv.Itoa(p.Procs), "--label-filter=" + p.LabelFilter,
		"--timeout=" + p.Timeout.String(), "--no-color", "--poll-progress-after=10m",
	}
	if s.Focus != "" {
		args = append(args, "--focus="+s.Focus)
	}
	if s.DryRun {
		args = append(args, "--dry-run", "-v")
	}
	args = append(args, s.E2ETest, "--",
		"--kubeconfig="+s.Kubeconfig,
		"--kubectl-path="+s.Kubectl,
		"--provider=skeleton",
		"--report-dir="+dir,
		"--e2e-output-dir="+dir,
		// The nodes' logs are the harness's to keep.
		"--disable-log-dump",
	)
	cmd := exec.CommandContext(ctx, s.Ginkgo, args...)
	if s.Netns != "" {
		cmd = exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + s.Netns, "--", s.Ginkgo}, args...)...)
	}
	cmd.Dir = dir
	// e2e.test names the images by upstream's registries (no
	// KUBE_TEST_REPO_LIST): containerd's mirror serves them.
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST=", "KUBE_TEST_REPO=")
	cmd.WaitDelay = time.Minute
	return cmd, nil
}

// Run runs phase p with its output in the phase directory's ginkgo.log,
// and reads its JUnit report.
func (s Suite) Run(ctx context.Context, p Phase) (Result, error) {
	cmd, err := s.Command(ctx, p)
	if err != nil {
		return Result{}, err
	}
	log, err := os.Create(filepath.Join(s.PhaseDir(p), "ginkgo.log"))
	if err != nil {
		return Result{}, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	begin := time.Now()
	runErr := cmd.Run()
	took := time.Since(begin)
	if s.DryRun {
		return Result{Phase: p.Name, Took: took}, runErr
	}
	res, err := ReadJUnit(filepath.Join(s.PhaseDir(p), "junit_01.xml"))
	res.Phase, res.Took = p.Name, took // the whole phase, set-up included
	if err != nil {
		return res, fmt.Errorf("phase %s: %v (ginkgo: %v; log %s)", p.Name, err, runErr, log.Name())
	}
	return res, nil
}
