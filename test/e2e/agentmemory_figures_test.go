package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/edgeplane/edgeplane/internal/pagecache"
	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// TestAgentMemoryFigures measures an agent's memory at rest, the figure of
// issue 47's agent target (docs/PERFORMANCE.md, "An agent's memory"): a
// two-node cluster (each node in a network namespace of its own) with
// figurePods pods on the agent; per configuration the agent is started
// again with the binary dropped from the page cache first, and its VmRSS,
// RssAnon and RssFile are sampled every 10 s from Ready over a window, with
// its CPU time. Configurations: the product as built, and each in
// EDGEPLANE_AGENT_FIGURES_ENV (";"-separated sets of space-separated
// VAR=value for the agent's environment, e.g. "GOGC=100"). Figures, not a
// check: runs with EDGEPLANE_AGENT_FIGURES=1 (window
// EDGEPLANE_AGENT_WINDOW, default 30m), under the e2e lock.
func TestAgentMemoryFigures(t *testing.T) {
	if os.Getenv("EDGEPLANE_AGENT_FIGURES") == "" {
		testenv.SkipByDesign(t, "agent-memory-figures")
	}
	window := 30 * time.Minute
	if w := os.Getenv("EDGEPLANE_AGENT_WINDOW"); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil {
			t.Fatalf("EDGEPLANE_AGENT_WINDOW: %v", err)
		}
		window = d
	}
	configs := [][]string{nil}
	for _, set := range strings.Split(os.Getenv("EDGEPLANE_AGENT_FIGURES_ENV"), ";") {
		if f := strings.Fields(set); len(f) > 0 {
			configs = append(configs, f)
		}
	}
	parallelNode(t, buildClusterImages(t))
	c := startTwoNodeCluster(t, twoNodeOptions{})
	if out, err := c.Server.kubectlStdin(figureManifest(c.AgentNode), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	eventually(t, 3*time.Minute, fmt.Sprintf("%d figure pods Running on %s", figurePods, c.AgentNode), func(ctx context.Context) (bool, error) {
		pods, err := appPods(ctx, c, "figure")
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n == figurePods, fmt.Errorf("%d of %d Running", n, figurePods)
	})
	for _, env := range configs {
		name := "as built"
		if env != nil {
			name = strings.Join(env, " ")
		}
		c.Agent.kill()
		// The agent runs a copy of the binary: the server maps the
		// binary itself, whose pages then cannot leave the page cache.
		bin := filepath.Join(t.TempDir(), "edgeplane")
		if out, err := exec.Command("cp", binary, bin).CombinedOutput(); err != nil {
			t.Fatalf("copying the binary: %v: %s", err, out)
		}
		dropped, err := pagecache.Drop([]string{bin})
		if err != nil {
			t.Fatalf("dropping %s from the page cache: %v", bin, err)
		}
		cmd := nsenterBinCmd(bin, c.AgentNS, c.agentArgs...)
		cmd.Env = append(os.Environ(), env...)
		c.Agent = startAgentOwned(t, c.owner, cmd)
		waitAgentReady(t, c.Agent)
		s := sampleAgent(t, c.Agent.cmd, window)
		t.Logf("figure: agent %s (%d pods, %.0f MiB of the binary dropped from the page cache before its start): %s", name, figurePods, mib(dropped), s)
	}
}

// agentSample is one reading of the agent process.
type agentSample struct {
	at              time.Duration
	rss, anon, file int64
	cpu             time.Duration
}

// agentSamples are readings every 10 s from Ready.
type agentSamples []agentSample

// sampleAgent reads the process of cmd every 10 s for window.
func sampleAgent(t *testing.T, cmd *exec.Cmd, window time.Duration) agentSamples {
	t.Helper()
	pid := cmd.Process.Pid
	began := time.Now()
	var out agentSamples
	for {
		s := agentSample{at: time.Since(began)}
		var errs [4]error
		s.rss, errs[0] = procfs.StatusBytes(pid, "VmRSS")
		s.anon, errs[1] = procfs.StatusBytes(pid, "RssAnon")
		s.file, errs[2] = procfs.StatusBytes(pid, "RssFile")
		s.cpu, errs[3] = procfs.CPUTime(pid)
		for _, err := range errs {
			if err != nil {
				t.Fatalf("reading the agent's /proc: %v", err)
			}
		}
		out = append(out, s)
		if s.at >= window {
			return out
		}
		time.Sleep(10 * time.Second)
	}
}

// String gives the readings 1 and 5 minutes after Ready and at the end,
// the highest VmRSS of the window's second half, and the CPU used over the
// window's second half.
func (ss agentSamples) String() string {
	at := func(d time.Duration) agentSample {
		for _, s := range ss {
			if s.at >= d {
				return s
			}
		}
		return ss[len(ss)-1]
	}
	last := ss[len(ss)-1]
	half := at(last.at / 2)
	var peak int64
	for _, s := range ss {
		if s.at >= half.at {
			peak = max(peak, s.rss)
		}
	}
	var b strings.Builder
	for _, s := range []agentSample{at(time.Minute), at(5 * time.Minute), last} {
		fmt.Fprintf(&b, "at %v VmRSS %.1f MiB (anon %.1f, file %.1f); ", s.at.Round(time.Second), mib(s.rss), mib(s.anon), mib(s.file))
	}
	cpu := float64(last.cpu-half.cpu) / float64(last.at-half.at) * 100
	fmt.Fprintf(&b, "second half: VmRSS at most %.1f MiB, CPU %.2f%% of a core", mib(peak), cpu)
	return b.String()
}
