package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// TestClusterNetworkFigures measures issue 27's network figures on the
// two-node harness and checks that each is in bounds: pod-to-pod round
// trip across the nodes against the same between the two namespaces with
// no pods in the way (plain host routing, the floor here); HTTP to a
// Service and to a pod across the nodes against HTTP between the
// namespaces; the time from `kubectl apply` of a 2-replica Deployment and
// its Service to the Service answering a pod; and the server's and the
// agent's RSS and CPU over an idle minute with the network parts on and
// off. Set EDGEPLANE_NET_FIGURES=1 to run it (two clusters and two idle
// minutes: about eight minutes on an idle machine).
func TestClusterNetworkFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two two-node clusters")
	}
	if os.Getenv("EDGEPLANE_NET_FIGURES") == "" {
		testenv.SkipByDesign(t, "net-figures")
	}
	t.Run("network on", func(t *testing.T) {
		c := startTwoNodeCluster(t, twoNodeOptions{})
		c.runPod(t, "cli", c.AgentNode, "exec sleep 3600", nil)
		webIP := c.runPod(t, "web-s", c.ServerNode, webScript("web-s"), nil)

		begin := time.Now()
		deployBackends(t, c)
		svcIP := clusterIP(t, c, "echo")
		c.eventuallyAnswers(t, "cli", "http://"+svcIP+":80/", "echo-")
		t.Logf("figure: kubectl apply of a 2-replica Deployment (one pod per node) and its Service, to all pods running and the Service answering a pod: %.1f s", time.Since(begin).Seconds())

		podRTT := pingAvgMS(t, func() (string, error) { return c.podExec("cli", "ping", "-c", "50", "-A", "-q", webIP) })
		hostRTT := pingAvgMS(t, func() (string, error) {
			out, err := exec.Command("nsenter", "--net=/run/netns/"+c.AgentNS, "busybox", "ping", "-c", "50", "-A", "-q", c.ServerIP).CombinedOutput()
			return string(out), err
		})
		t.Logf("figure: ping round trip (50, adaptive), agent node to server node: pod to pod %.3f ms, plain host routing %.3f ms", podRTT, hostRTT)
		if podRTT > 20 || hostRTT > 20 {
			t.Errorf("round trips %.3f / %.3f ms: over 20 ms between two namespaces of one host", podRTT, hostRTT)
		}

		const n = 200
		svcUS := c.httpLoopMicros(t, "cli", "http://"+svcIP+":80/", n)
		podUS := c.httpLoopMicros(t, "cli", "http://"+webIP+":8080/", n)
		hostUS := hostHTTPLoopMicros(t, c, n)
		t.Logf("figure: HTTP GET (busybox wget, new connection each, %d in a row) from the agent: to the Service %d us, to a pod on the server node %d us, plain host routing (namespace to namespace) %d us", n, svcUS, podUS, hostUS)

		idle(t, "network on", c)
	})
	t.Run("network off", func(t *testing.T) {
		c := startTwoNodeCluster(t, twoNodeOptions{ServerArgs: []string{"--flannel-backend=none", "--disable=kube-proxy"}})
		c.runPod(t, "cli", c.AgentNode, "exec sleep 3600", nil)
		c.runPod(t, "web-s", c.ServerNode, webScript("web-s"), nil)
		deployBackends(t, c)
		idle(t, "network off", c)
	})
}

// idle reads the server's and the agent's CPU over an idle minute and
// their RSS at its end.
func idle(t *testing.T, name string, c *twoNodeCluster) {
	t.Helper()
	spid, apid := c.Server.cmd.Process.Pid, c.Agent.cmd.Process.Pid
	s0, err1 := procfs.CPUTime(spid)
	a0, err2 := procfs.CPUTime(apid)
	if err1 != nil || err2 != nil {
		t.Fatalf("cpu time: %v, %v", err1, err2)
	}
	time.Sleep(time.Minute) // the idle window measured
	s1, err1 := procfs.CPUTime(spid)
	a1, err2 := procfs.CPUTime(apid)
	srss, err3 := procfs.RSS(spid)
	arss, err4 := procfs.RSS(apid)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		t.Fatalf("process figures: %v, %v, %v, %v", err1, err2, err3, err4)
	}
	t.Logf("figure: %s, idle minute after the workload: server (control plane + node) RSS %d MiB, CPU %.2f s; agent RSS %d MiB, CPU %.2f s",
		name, srss>>20, (s1 - s0).Seconds(), arss>>20, (a1 - a0).Seconds())
}

// eventuallyAnswers waits until pod fetches a body starting with prefix.
func (c *twoNodeCluster) eventuallyAnswers(t *testing.T, pod, url, prefix string) {
	t.Helper()
	eventually(t, 2*time.Minute, pod+" gets an answer from "+url, func(context.Context) (bool, error) {
		got, err := c.fetch(pod, url)
		return err == nil && strings.HasPrefix(got, prefix), fmt.Errorf("got %q, %v", got, err)
	})
}

var pingAvg = regexp.MustCompile(`min/avg/max = [0-9.]+/([0-9.]+)/`)

// pingAvgMS runs ping and returns its average round trip in ms.
func pingAvgMS(t *testing.T, run func() (string, error)) float64 {
	t.Helper()
	out, err := run()
	if err != nil {
		t.Fatalf("ping: %v: %s", err, out)
	}
	m := pingAvg.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no round-trip summary in %q", out)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// loopScript fetches url n times with busybox wget and prints the mean
// time per request in microseconds, timed with /proc/uptime (10 ms
// resolution over the whole loop).
func loopScript(url string, n int) string {
	return fmt.Sprintf(`read a _ < /proc/uptime; i=0; while [ $i -lt %d ]; do wget -q -O /dev/null %s || exit 1; i=$((i+1)); done; read b _ < /proc/uptime; a=${a%%.*}${a#*.}; b=${b%%.*}${b#*.}; echo $(( (b-a)*10000/%d ))`, n, url, n)
}

func (c *twoNodeCluster) httpLoopMicros(t *testing.T, pod, url string, n int) int {
	t.Helper()
	out, err := c.podExec(pod, "sh", "-c", loopScript(url, n))
	if err != nil {
		t.Fatalf("HTTP loop from %s to %s: %v: %s", pod, url, err, out)
	}
	v, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("HTTP loop output %q: %v", out, err)
	}
	return v
}

// hostHTTPLoopMicros serves a page with busybox httpd in the server's
// namespace and fetches it from the agent's namespace: no pod network, no
// Service, the floor of the same HTTP loop.
func hostHTTPLoopMicros(t *testing.T, c *twoNodeCluster, n int) int {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("floor\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	httpd := exec.Command("nsenter", "--net=/run/netns/"+c.ServerNS, "busybox", "httpd", "-f", "-p", c.ServerIP+":18080", "-h", dir)
	if err := httpd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = httpd.Process.Kill(); _ = httpd.Wait() }()
	url := "http://" + c.ServerIP + ":18080/"
	var out []byte
	var err error
	for i := 0; i < 50; i++ { // httpd listens within a moment
		if out, err = exec.Command("nsenter", "--net=/run/netns/"+c.AgentNS, "busybox", "wget", "-q", "-O", "-", url).CombinedOutput(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("host floor: %v: %s", err, out)
	}
	out, err = exec.Command("nsenter", "--net=/run/netns/"+c.AgentNS, "busybox", "sh", "-c", loopScript(url, n)).CombinedOutput()
	if err != nil {
		t.Fatalf("host floor loop: %v: %s", err, out)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("host floor output %q: %v", out, err)
	}
	return v
}
