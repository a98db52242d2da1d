package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"github.com/edgeplane/edgeplane/pkg/apicache"
)

// TestAPICacheFigures measures the figures of docs/NODES.md, "Offline: the
// node's API cache", on a two-node cluster (each node in a network
// namespace of its own) with figurePods pods on the agent: the agent's
// VmRSS and RssAnon 60 s after it is Ready, with the cache and without
// (--disable=api-cache); the bytes the cache appended to its journal, and
// the agent process's own write_bytes, over a window idle and a window of
// partition (the agent's namespace drops everything to and from the
// server); and the time from an agent start, offline, with every pod
// sandbox and container of the node removed, to all its pods running
// again. Figures, not a check: runs with EDGEPLANE_APICACHE_FIGURES=1
// (window EDGEPLANE_APICACHE_WINDOW, default 5m), under the e2e lock.
func TestAPICacheFigures(t *testing.T) {
	if os.Getenv("EDGEPLANE_APICACHE_FIGURES") == "" {
		testenv.SkipByDesign(t, "apicache-figures")
	}
	window := 5 * time.Minute
	if w := os.Getenv("EDGEPLANE_APICACHE_WINDOW"); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil {
			t.Fatalf("EDGEPLANE_APICACHE_WINDOW: %v", err)
		}
		window = d
	}
	parallelNode(t, buildClusterImages(t))
	c := startTwoNodeCluster(t, twoNodeOptions{AgentArgs: []string{"--node-label=edgeplane.io/autonomous=true"}})
	if out, err := c.Server.kubectlStdin(figureManifest(c.AgentNode), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	var uids []string
	eventually(t, 3*time.Minute, fmt.Sprintf("%d figure pods Running on %s", figurePods, c.AgentNode), func(ctx context.Context) (bool, error) {
		pods, err := appPods(ctx, c, "figure")
		if err != nil {
			return false, err
		}
		uids = uids[:0]
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				uids = append(uids, string(p.UID))
			}
		}
		return len(uids) == figurePods, fmt.Errorf("%d of %d Running", len(uids), figurePods)
	})
	journal := filepath.Join(c.AgentDir, "agent", apicache.DirName, apicache.FileName)
	base := append([]string(nil), c.agentArgs...)
	restart := func(extra ...string) int {
		c.agentArgs = append(append([]string(nil), base...), extra...)
		c.restartAgent(t)
		waitAgentReady(t, c.Agent)
		return c.Agent.cmd.Process.Pid
	}

	for _, m := range []struct{ name, flag string }{{"cache", ""}, {"no cache", "--disable=api-cache"}} {
		var pid int
		if m.flag == "" {
			pid = restart()
		} else {
			pid = restart(m.flag)
		}
		time.Sleep(60 * time.Second) // the idle settling measured, not a wait for a condition
		rss, err1 := procfs.StatusBytes(pid, "VmRSS")
		anon, err2 := procfs.StatusBytes(pid, "RssAnon")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		t.Logf("figure: agent with %s: VmRSS %.1f MiB, RssAnon %.1f MiB (60 s after Ready, %d pods)", m.name, mib(rss), mib(anon), figurePods)
		if m.flag == "" {
			j, w := windowWrites(t, pid, journal, window)
			t.Logf("figure: idle, cache on: the journal grew %d bytes in %v (%.0f KB/h); the agent process wrote %d bytes (%.0f KB/h)", j, window, perHour(j, window), w, perHour(w, window))
		} else {
			_, w := windowWrites(t, pid, "", window)
			t.Logf("figure: idle, cache off: the agent process wrote %d bytes in %v (%.0f KB/h)", w, window, perHour(w, window))
		}
	}

	pid := restart()
	time.Sleep(30 * time.Second)
	cutLink(t, c.AgentNS, c.ServerIP)
	defer restoreLink(t, c.AgentNS)
	j, w := windowWrites(t, pid, journal, window)
	t.Logf("figure: partition, cache on: the journal grew %d bytes in %v (%.0f KB/h); the agent process wrote %d bytes (%.0f KB/h)", j, window, perHour(j, window), w, perHour(w, window))

	// A reboot with the link down: the agent stopped, every sandbox and
	// container of the node removed, the agent started.
	c.Agent.kill()
	cri := dialCRI(t, c.AgentCtrd.Endpoint)
	removed := cri.removeAllPods(t)
	began := time.Now()
	c.Agent = c.startAgent(t)
	eventually(t, 5*time.Minute, "every figure pod running again on the offline node", func(ctx context.Context) (bool, error) {
		n := 0
		for _, uid := range uids {
			if cs, err := cri.running(ctx, uid); err == nil && len(cs) > 0 {
				n++
			}
		}
		return n == len(uids), fmt.Errorf("%d of %d running", n, len(uids))
	})
	t.Logf("figure: offline restart (%d sandboxes removed): agent start -> all %d pods running again: %.1f s", removed, len(uids), time.Since(began).Seconds())
}

// figurePods is how many pods the figures' Deployment runs on the agent.
const figurePods = 10

// figureManifest is a Deployment of figurePods busybox web servers on node
// with a ConfigMap volume, and its Service.
func figureManifest(node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: figure}
data: {index.html: "figure\n"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: figure}
spec:
  replicas: %d
  selector: {matchLabels: {app: figure}}
  template:
    metadata: {labels: {app: figure}}
    spec:
      nodeSelector: {kubernetes.io/hostname: %s}
      containers:
      - name: web
        image: %s
        imagePullPolicy: IfNotPresent
        command: ["httpd", "-f", "-p", "8080", "-h", "/www"]
        volumeMounts: [{name: www, mountPath: /www}]
      volumes:
      - name: www
        configMap: {name: figure}
---
apiVersion: v1
kind: Service
metadata: {name: figure}
spec:
  selector: {app: figure}
  ports: [{port: 80, targetPort: 8080}]
`, figurePods, node, testimage.DefaultBusyboxName)
}

// windowWrites is the growth of the file at journal ("": none) and the
// process's write_bytes over d.
func windowWrites(t *testing.T, pid int, journal string, d time.Duration) (grew, wrote int64) {
	t.Helper()
	size := func() int64 {
		if journal == "" {
			return 0
		}
		fi, err := os.Stat(journal)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	io0, err := procfs.ReadIO(pid)
	if err != nil {
		t.Fatal(err)
	}
	s0 := size()
	time.Sleep(d)
	io1, err := procfs.ReadIO(pid)
	if err != nil {
		t.Fatal(err)
	}
	return size() - s0, io1.WriteBytes - io0.WriteBytes
}

func perHour(b int64, d time.Duration) float64 { return float64(b) / 1000 / d.Hours() }
