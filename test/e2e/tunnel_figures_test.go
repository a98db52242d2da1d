package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// TestNodeTunnelFigures measures the figures of docs/NODES.md, "Edge
// links": on a two-node cluster with a flat network (no firewall), the
// wall time of `kubectl exec POD -- true` and `kubectl logs POD` (kubectl's
// own start included), and of an HTTP request on a new connection through
// one `kubectl port-forward`, for a pod on the agent, with the agent's
// kubelet dialled through the tunnel (--node-tunnel=always) and directly
// (auto, which dials directly on a flat network); and the agent's VmRSS,
// with the tunnel and with --node-tunnel=off. Medians of tunnelRuns runs.
// Figures, not a check: runs with EDGEPLANE_TUNNEL_FIGURES=1, under the
// e2e lock.
func TestNodeTunnelFigures(t *testing.T) {
	if os.Getenv("EDGEPLANE_TUNNEL_FIGURES") == "" {
		testenv.SkipByDesign(t, "tunnel-figures")
	}
	parallelNode(t, buildClusterImages(t))
	c := startTwoNodeCluster(t, twoNodeOptions{AgentArgs: []string{"--node-tunnel=always"}})
	c.runPod(t, "fig", c.AgentNode, "echo hello; mkdir -p /www; echo served > /www/index.html; exec httpd -f -p 8080 -h /www", nil)
	for _, mode := range []string{"always", "auto", "off"} {
		if mode != "always" {
			c.agentArgs = replaceTunnelFlag(c.agentArgs, mode)
			c.restartAgent(t)
		}
		waitAgentReady(t, c.Agent)
		if mode == "auto" {
			eventually(t, time.Minute, "the server's verdict: direct", func(context.Context) (bool, error) {
				return strings.Count(c.Server.output.String(), "Node's kubelet answers direct dials") > 0, nil
			})
		}
		time.Sleep(30 * time.Second) // the idle settling measured, not a wait for a condition
		rss, err := procfs.StatusBytes(c.Agent.cmd.Process.Pid, "VmRSS")
		if err != nil {
			t.Fatal(err)
		}
		exec := timeRuns(t, func() error { _, err := c.podExec("fig", "true"); return err })
		logs := timeRuns(t, func() error { _, err := c.kubectl("logs", "fig"); return err })
		pf := portForwardRuns(t, c, "fig")
		t.Logf("figure: --node-tunnel=%s: agent VmRSS %.1f MiB; medians of %d: kubectl exec %s, kubectl logs %s, port-forward request %s",
			mode, float64(rss)/(1<<20), tunnelRuns, exec, logs, pf)
	}
}

// tunnelRuns is how many times each figure is taken.
const tunnelRuns = 15

// replaceTunnelFlag sets --node-tunnel=mode in args.
func replaceTunnelFlag(args []string, mode string) []string {
	out := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, "--node-tunnel=") })
	return append(out, "--node-tunnel="+mode)
}

// timeRuns is the median wall time of f over tunnelRuns runs.
func timeRuns(t *testing.T, f func() error) time.Duration {
	t.Helper()
	var d []time.Duration
	for range tunnelRuns {
		began := time.Now()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		d = append(d, time.Since(began))
	}
	slices.Sort(d)
	return d[len(d)/2].Round(100 * time.Microsecond)
}

// portForwardRuns is the median time of an HTTP request on a new
// connection through one `kubectl port-forward` to pod's port 8080.
func portForwardRuns(t *testing.T, c *twoNodeCluster, pod string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", c.Server.kubeconfig, "port-forward", "--address", "127.0.0.1", pod, ":8080")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	buf := make([]byte, 512)
	n, _ := stdout.Read(buf)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	m := regexp.MustCompile(`127\.0\.0\.1:(\d+)`).FindStringSubmatch(string(buf[:n]))
	if m == nil {
		t.Fatalf("kubectl port-forward: no local port in %q", buf[:n])
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	get := func() error {
		resp, err := client.Get("http://127.0.0.1:" + m[1] + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if strings.TrimSpace(string(body)) != "served" {
			return fmt.Errorf("got %q", body)
		}
		return nil
	}
	eventually(t, time.Minute, "a page through port-forward", func(context.Context) (bool, error) { err := get(); return err == nil, err })
	return timeRuns(t, get)
}
