package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// TestAgentFollowsServers: three servers on embedded etcd, each in a
// network namespace of its own, and an agent that joined through the
// first. The agent's node-local API endpoint learns all three from the
// `kubernetes` EndpointSlice and keeps them on disk. The first server is
// SIGKILLed: the node keeps renewing its Lease and stays Ready, a new pod
// is scheduled and started on it, and `kubectl logs` of that pod works
// through a surviving server. The agent is then restarted (SIGKILL, as a
// crash) while the server it joined through is still down: it starts from
// the servers it kept, its node is Ready again, and a pod created after the
// restart runs. Without the endpoint the agent's parts talked to the
// first server only and the node went NotReady with it; without the kept
// servers the restarted agent waited for the first server and failed.
func TestAgentFollowsServers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three servers and an agent node in network namespaces")
	}
	parallelNode(t, buildClusterImages(t))
	clusterNetMu.Lock()
	n := clusterNetNext % 200
	clusterNetNext++
	clusterNetMu.Unlock()
	pid := os.Getpid()
	hostIP := fmt.Sprintf("10.204.%d.1", n)
	bridge := fmt.Sprintf("epb%d-%d", pid%100000, n)
	ipCmd(t, "link", "add", bridge, "type", "bridge")
	t.Cleanup(func() { _ = execIP("link", "del", bridge) })
	ipCmd(t, "addr", "add", hostIP+"/24", "dev", bridge)
	ipCmd(t, "link", "set", bridge, "up")
	names := []string{"s1", "s2", "s3", "a"}
	ips := map[string]string{}
	nss := map[string]string{}
	for i, name := range names {
		ns := fmt.Sprintf("ep-net-%d-%d-%s", pid, n, name)
		ip := fmt.Sprintf("10.204.%d.%d", n, i+2)
		host := fmt.Sprintf("epv%d-%d%d", pid%100000, n, i)
		ipCmd(t, "netns", "add", ns)
		t.Cleanup(func() { _ = execIP("netns", "del", ns) })
		ipCmd(t, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
		t.Cleanup(func() { _ = execIP("link", "del", host) })
		ipCmd(t, "link", "set", host, "master", bridge, "up")
		ipCmd(t, "-n", ns, "addr", "add", ip+"/24", "dev", "eth0")
		ipCmd(t, "-n", ns, "link", "set", "eth0", "up")
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
		nss[name], ips[name] = ns, ip
	}
	url := func(name string) string { return "https://" + ips[name] + ":6443" }

	// The servers: control planes only (no kubelet), one etcd cluster.
	startSrv := func(name string, extra ...string) *server {
		dir := t.TempDir()
		args := append([]string{"server", "--data-dir", dir, "--bind-address", "0.0.0.0", "--advertise-address", ips[name],
			"--https-port", "6443", "--disable=kubelet", "--disable=coredns"}, extra...)
		s := startServerCmd(t, dir, nsenterCmd(nss[name], args...))
		s.useAddress(t, url(name))
		return s
	}
	s1 := startSrv("s1", "--cluster-init")
	serverToken := token(t, s1.dataDir)
	s2 := startSrv("s2", "--server", url("s1"), "--token", serverToken)
	s3 := startSrv("s3", "--server", url("s1"), "--token", serverToken)
	s2.mustKeepRunning(t)
	s3.mustKeepRunning(t)

	// The agent joins through s1.
	kubeletArgs := twoNodeOptions{}.kubeletArgs(t, nss["a"])
	ctrd := testcontainerd.Start(t, testcontainerd.Options{Netns: nss["a"]})
	agentDir := agentDataDir(t)
	clusterImages(t, filepath.Join(agentDir, "agent", "images"), true)
	const node = "edge-a"
	agentArgs := append([]string{"agent", "--config", "", "--server", url("s1"),
		"--token", serverNodeToken(t, s1), "--data-dir", agentDir,
		"--node-name", node, "--node-ip", ips["a"],
		"--container-runtime-endpoint", ctrd.Endpoint, "--cni-conf-dir", ctrd.CNIConfDir,
		"--pause-image", testimage.DefaultPauseName,
	}, kubeletArgs...)
	agent := startAgentCmd(t, nsenterCmd(nss["a"], agentArgs...))
	waitNodeReady(t, s2, node)

	// The endpoint learns every server and keeps them on disk.
	want := []string{ips["s1"] + ":6443", ips["s2"] + ":6443", ips["s3"] + ":6443"}
	stateFile := filepath.Join(agentDir, "agent", "api-servers.json")
	eventually(t, time.Minute, "the agent's endpoint keeps all three servers", func(context.Context) (bool, error) {
		data, err := os.ReadFile(stateFile)
		if err != nil {
			return false, err
		}
		var st struct{ Servers []string }
		if err := json.Unmarshal(data, &st); err != nil {
			return false, err
		}
		slices.Sort(st.Servers)
		return slices.Equal(st.Servers, want), fmt.Errorf("%s holds %v, want %v", stateFile, st.Servers, want)
	})

	// The server the agent joined through dies.
	killed := time.Now()
	s1.kill()
	leaseRenewedAfter := func(what string, since time.Time) {
		t.Helper()
		eventually(t, 90*time.Second, what, func(ctx context.Context) (bool, error) {
			l, err := s2.client.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if l.Spec.RenewTime == nil {
				return false, fmt.Errorf("no renew time")
			}
			return l.Spec.RenewTime.After(since.Add(time.Second)), fmt.Errorf("last renewal %s, want after %s", l.Spec.RenewTime.Format(time.RFC3339Nano), since.Format(time.RFC3339Nano))
		})
	}
	leaseRenewedAfter("the node's Lease renewed through a surviving server", killed)
	t.Logf("Lease renewed %s after the first server was killed", time.Since(killed).Round(time.Millisecond))
	waitNodeReady(t, s2, node)

	logsThrough := func(s *server, pod, want string) {
		t.Helper()
		eventually(t, time.Minute, "kubectl logs "+pod, func(context.Context) (bool, error) {
			out, err := s.kubectl("logs", pod)
			if err != nil {
				return false, fmt.Errorf("%v: %s", err, out)
			}
			return strings.Contains(out, want), fmt.Errorf("logs %q, want %q", out, want)
		})
	}
	runPod := func(name string) {
		t.Helper()
		if out, err := s2.kubectl("run", name, "--image="+testimage.DefaultBusyboxName, "--restart=Never", "--labels=app="+name,
			"--command", "--", "sh", "-c", "echo hello from "+name+"; exec sleep 3600"); err != nil {
			t.Fatalf("kubectl run %s: %v\n%s", name, err, out)
		}
		pods := runningPods(t, s2, name, 1)
		if pods[0].Spec.NodeName != node {
			t.Fatalf("pod %s on %q, want %q", name, pods[0].Spec.NodeName, node)
		}
		logsThrough(s3, name, "hello from "+name)
	}
	runPod("after-failover")

	// The agent restarts while s1 is still down.
	agent.kill()
	restarted := time.Now()
	startAgentCmd(t, nsenterCmd(nss["a"], agentArgs...))
	leaseRenewedAfter("the restarted agent's Lease renewed", restarted)
	t.Logf("restarted agent renewed its Lease %s after its start", time.Since(restarted).Round(time.Millisecond))
	waitNodeReady(t, s3, node)
	runPod("after-restart")
}

// execIP runs ip(8) for a cleanup, ignoring what it prints.
func execIP(args ...string) error { return exec.Command("ip", args...).Run() }
