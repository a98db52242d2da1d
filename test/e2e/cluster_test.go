package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// The two-node cluster harness: a bridge on the host, and two network
// namespaces, S (the server, which is its own node) and A (an agent), each
// with a veth on the bridge and an address of a test range. Each node runs
// its own containerd in its namespace; the server and the agent run under
// `nsenter --net` (the host mount namespace is kept, so that containerd
// sees the kubelet's volume mounts). The test reaches the API over the
// bridge (the host holds an address on it) and the nodes reach each other
// over it: the pod network really crosses two nodes with two addresses.
// Everything is removed in t.Cleanup.

// twoNodeOptions tune startTwoNodeCluster.
type twoNodeOptions struct {
	// ServerArgs and AgentArgs are extra flags.
	ServerArgs []string
	AgentArgs  []string
	// PerQoSCgroups runs both kubelets with the product's cgroup layout
	// (per-QoS cgroups, node allocatable enforced on the pods) instead of
	// agentKubeletArgs' flat one, each under a cgroup root of its own
	// (testCgroupRoot: /<node's namespace>). The root is this host's need,
	// not a product default: kubelets of other tests on the host would
	// take pod cgroups under a shared /kubepods for orphans and kill them.
	PerQoSCgroups bool
	// RegistryConfigDir, when set, is called with the host's address on the
	// nodes' bridge before the nodes' containerds start and returns their
	// registry configuration directory (testcontainerd.Options): a test's
	// registry mirror listens there.
	RegistryConfigDir func(t *testing.T, hostIP string) string
	// RouteServiceCIDR gives each namespace a route for the Service range
	// (below); only the conformance run asks for it (aggregated APIs and
	// webhooks reached by their ClusterIP from the node itself).
	RouteServiceCIDR bool
	// Bin runs another edgeplane binary (an older version) for both
	// nodes; empty: the one under test.
	Bin string
	// ManagedRuntime starts both nodes with no runtime flags (no
	// --container-runtime-endpoint, no --pause-image): each runs its own
	// containerd (Debian's, on the PATH) under its data dir, with the pause
	// image inside edgeplane (none in the airgap folder). This host's quirks
	// go in each node's config.toml.tmpl (managedRuntime), never in the
	// product's defaults. RegistryConfigDir does not apply.
	ManagedRuntime bool
	// RegistriesFile, with ManagedRuntime, is called with the host's
	// address on the nodes' bridge before the nodes start and returns the
	// nodes' --registries-file; nil: none (not the host's
	// /etc/edgeplane/registries.yaml).
	RegistriesFile func(t *testing.T, hostIP string) string
	// BeforeAgent is called once the server is ready, before the agent
	// starts (a firewall rule between the two, say).
	BeforeAgent func(t *testing.T, c *twoNodeCluster)
}

// kubeletArgs are a node's kubelet flags of opts (ns: the node's network
// namespace, which names its cgroup root).
func (opts twoNodeOptions) kubeletArgs(t *testing.T, ns string) []string {
	if !opts.PerQoSCgroups {
		return agentKubeletArgs(t)
	}
	return append(kubeletPorts(t), "--kubelet-arg=cgroup-root="+testCgroupRoot(t, ns),
		"--pod-logs-dir", t.TempDir()) // not the host's /var/log/pods: its kubelet would remove the other's logs
}

// twoNodeCluster is a running two-node cluster.
type twoNodeCluster struct {
	Server *server
	Agent  *agentProc

	// Node names, namespaces and addresses.
	ServerNode, AgentNode string
	ServerNS, AgentNS     string
	ServerIP, AgentIP     string
	HostIP                string
	// Bridge is the host's bridge the nodes' veths are on (a test adds
	// a node of its own to it: partition_helpers_test.go).
	Bridge string

	// ServerCtrd and AgentCtrd are the nodes' containerds of the test's
	// own; nil with ManagedRuntime, where ServerDir and AgentDir (each
	// node's --data-dir) hold the managed ones (agent/containerd).
	ServerCtrd, AgentCtrd *testcontainerd.Containerd
	ServerDir, AgentDir   string

	serverArgs, agentArgs []string
	// owner is the test that made the cluster: agents that outlive a
	// subtest are its.
	owner *testing.T
}

// serviceCIDR is the servers' default Service range.
const serviceCIDR = "10.43.0.0/16"

// clusterNet numbers the test ranges of one test process (10.204.N.0/24).
var (
	clusterNetMu   sync.Mutex
	clusterNetNext = os.Getpid() % 200
)

// inClusterClient is the in-cluster client binary, built once per run.
var (
	inClusterOnce sync.Once
	inClusterPath string
	inClusterErr  error
)

func buildInClusterClient(t *testing.T) string {
	t.Helper()
	inClusterOnce.Do(func() {
		dir, err := os.MkdirTemp(runDir, "ep-incluster-")
		if err != nil {
			inClusterErr = err
			return
		}
		inClusterPath = filepath.Join(dir, "incluster")
		cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", inClusterPath, "../../internal/testing/testimage/incluster")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			inClusterErr = fmt.Errorf("build the in-cluster client: %v\n%s", err, out)
		}
	})
	if inClusterErr != nil {
		t.Fatal(inClusterErr)
	}
	return inClusterPath
}

// coreDNS is the CoreDNS test image, its binary built once per run from
// the separate internal/testing/testimage/coredns module.
var (
	coreDNSOnce sync.Once
	coreDNSImg  testimage.Image
	coreDNSErr  error
	coreDNSTook time.Duration
)

func coreDNSImage(t *testing.T) testimage.Image {
	t.Helper()
	coreDNSOnce.Do(func() {
		dir, err := os.MkdirTemp(runDir, "ep-coredns-")
		if err != nil {
			coreDNSErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		bin, took, err := testimage.BuildCoreDNS(ctx, dir)
		if err != nil {
			coreDNSErr = err
			return
		}
		coreDNSTook = took
		coreDNSImg, coreDNSErr = testimage.CoreDNS(bin)
	})
	if coreDNSErr != nil {
		t.Fatal(coreDNSErr)
	}
	t.Logf("CoreDNS built in %s (once per run)", coreDNSTook.Round(time.Millisecond))
	return coreDNSImg
}

// buildClusterImages is a parallelNode before func for the tests that run
// startTwoNodeCluster: it builds what clusterImages needs.
func buildClusterImages(t *testing.T) func() {
	return func() {
		buildInClusterClient(t)
		coreDNSImage(t)
	}
}

// clusterImages puts the workload image (busybox plus the in-cluster
// client), the CoreDNS image and, with pause, the sandbox image in dir.
func clusterImages(t *testing.T, dir string, pause bool) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	client, err := os.ReadFile(buildInClusterClient(t))
	if err != nil {
		t.Fatal(err)
	}
	bb := testimage.Busybox()
	bb.Files = append(bb.Files, testimage.File{Path: "bin/incluster", Mode: 0o755, Body: client})
	images := []testimage.Image{bb, coreDNSImage(t)}
	if pause {
		images = append(images, testimage.Pause())
	}
	for _, img := range images {
		if _, err := testimage.Write(dir, img); err != nil {
			t.Fatal(err)
		}
	}
}

// startTwoNodeCluster starts the server (node "srv") in namespace S and the
// agent (node "agt") in namespace A and waits until both nodes are Ready.
func startTwoNodeCluster(t *testing.T, opts twoNodeOptions) *twoNodeCluster {
	t.Helper()
	clusterNetMu.Lock()
	n := clusterNetNext % 200
	clusterNetNext++
	clusterNetMu.Unlock()
	pid := os.Getpid()
	c := &twoNodeCluster{
		owner:      t,
		ServerNode: "srv", AgentNode: "agt",
		ServerNS: fmt.Sprintf("ep-net-%d-%d-s", pid, n), AgentNS: fmt.Sprintf("ep-net-%d-%d-a", pid, n),
		HostIP: fmt.Sprintf("10.204.%d.1", n), ServerIP: fmt.Sprintf("10.204.%d.2", n), AgentIP: fmt.Sprintf("10.204.%d.3", n),
	}
	bridge := fmt.Sprintf("epb%d-%d", pid%100000, n)
	c.Bridge = bridge
	ipCmd(t, "link", "add", bridge, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	ipCmd(t, "addr", "add", c.HostIP+"/24", "dev", bridge)
	ipCmd(t, "link", "set", bridge, "up")
	for i, side := range []struct{ ns, ip string }{{c.ServerNS, c.ServerIP}, {c.AgentNS, c.AgentIP}} {
		host := fmt.Sprintf("epv%d-%d%c", pid%100000, n, "sa"[i])
		ipCmd(t, "netns", "add", side.ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", side.ns).Run() })
		ipCmd(t, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", side.ns)
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", host).Run() })
		ipCmd(t, "link", "set", host, "master", bridge, "up")
		ipCmd(t, "-n", side.ns, "addr", "add", side.ip+"/24", "dev", "eth0")
		ipCmd(t, "-n", side.ns, "link", "set", "eth0", "up")
		ipCmd(t, "-n", side.ns, "link", "set", "lo", "up")
		// A host's default route makes a ClusterIP routable before
		// kube-proxy's DNAT picks the endpoint: without one, the node's
		// own processes (the API server dialling an aggregated API or a
		// webhook Service) get "network is unreachable". These namespaces
		// have no default route (nothing of a test leaves the host), so the
		// Service range gets a route into loopback: what is translated to
		// an endpoint is routed again to it, the rest is dropped there.
		if opts.RouteServiceCIDR {
			ipCmd(t, "-n", side.ns, "route", "add", serviceCIDR, "dev", "lo")
		}
	}

	// Before containerd: the cgroup roots are removed after the pods are.
	serverKubelet, agentKubelet := opts.kubeletArgs(t, c.ServerNS), opts.kubeletArgs(t, c.AgentNS)
	var dataDir, agentDir string
	var serverRuntime, agentRuntime []string
	if opts.ManagedRuntime {
		// Both data dirs first: each managed containerd's cleanup must run
		// before its data dir is removed.
		dataDir, agentDir = agentDataDir(t), agentDataDir(t)
		registries := filepath.Join(t.TempDir(), "registries.yaml") // no such file
		if opts.RegistriesFile != nil {
			registries = opts.RegistriesFile(t, c.HostIP)
		}
		serverRuntime = managedRuntime(t, dataDir, c.ServerNS, registries)
		agentRuntime = managedRuntime(t, agentDir, c.AgentNS, registries)
	} else {
		var registries string
		if opts.RegistryConfigDir != nil {
			registries = opts.RegistryConfigDir(t, c.HostIP)
		}
		c.ServerCtrd = testcontainerd.Start(t, testcontainerd.Options{Netns: c.ServerNS, RegistryConfigDir: registries})
		c.AgentCtrd = testcontainerd.Start(t, testcontainerd.Options{Netns: c.AgentNS, RegistryConfigDir: registries})
		serverRuntime = []string{"--container-runtime-endpoint", c.ServerCtrd.Endpoint, "--cni-conf-dir", c.ServerCtrd.CNIConfDir,
			"--pause-image", testimage.DefaultPauseName}
		agentRuntime = []string{"--container-runtime-endpoint", c.AgentCtrd.Endpoint, "--cni-conf-dir", c.AgentCtrd.CNIConfDir,
			"--pause-image", testimage.DefaultPauseName}
		dataDir = agentDataDir(t) // short: the kubelet's sockets live below it
	}
	c.ServerDir = dataDir
	clusterImages(t, filepath.Join(dataDir, "agent", "images"), !opts.ManagedRuntime)
	serverArgs := append([]string{"server", "--data-dir", dataDir,
		// The whole namespace, loopback included: the server's own
		// components dial 127.0.0.1.
		"--bind-address", "0.0.0.0", "--advertise-address", c.ServerIP, "--https-port", "6443",
		"--node-name", c.ServerNode, "--node-ip", c.ServerIP,
		"--coredns-image", testimage.DefaultCoreDNSName,
	}, serverRuntime...)
	serverArgs = append(serverArgs, serverKubelet...) // ports, and a pod log dir of its own
	// agentKubeletArgs (or a cgroup root of its own) for the server's
	// kubelet too: a kubelet with per-QoS cgroups treats pod cgroups under
	// /kubepods that it does not know as orphans and kills their processes,
	// so two of them on one host (this test's and another test's
	// server-as-node) kill each other's pods (seen: a shim killed 50 ms
	// after StartContainer).
	serverArgs = append(serverArgs, opts.ServerArgs...)
	c.serverArgs = serverArgs
	c.Server = startServerCmd(t, dataDir, nsenterBinCmd(opts.Bin, c.ServerNS, serverArgs...))
	c.Server.useAddress(t, "https://"+c.ServerIP+":6443")

	if agentDir == "" {
		agentDir = agentDataDir(t)
	}
	c.AgentDir = agentDir
	clusterImages(t, filepath.Join(agentDir, "agent", "images"), !opts.ManagedRuntime)
	c.agentArgs = append([]string{"agent", "--config", "", "--server", "https://" + c.ServerIP + ":6443",
		"--token", serverNodeToken(t, c.Server), "--data-dir", agentDir,
		"--node-name", c.AgentNode, "--node-ip", c.AgentIP,
	}, agentRuntime...)
	c.agentArgs = append(c.agentArgs, agentKubelet...)
	c.agentArgs = append(c.agentArgs, opts.AgentArgs...)
	if opts.BeforeAgent != nil {
		opts.BeforeAgent(t, c)
	}
	c.Agent = startAgentCmd(t, nsenterBinCmd(opts.Bin, c.AgentNS, c.agentArgs...))
	c.Server.mustKeepRunning(t)

	waitNodeReady(t, c.Server, c.ServerNode)
	waitNodeReady(t, c.Server, c.AgentNode)
	return c
}

// nsenterCmd runs the edgeplane binary in network namespace ns.
func nsenterCmd(ns string, args ...string) *exec.Cmd { return nsenterBinCmd("", ns, args...) }

// nsenterBinCmd runs bin (empty: the binary under test) in network
// namespace ns.
func nsenterBinCmd(bin, ns string, args ...string) *exec.Cmd {
	if bin == "" {
		bin = binary
	}
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns, "--", bin}, args...)...)
}

// startServer's variant for a prepared command is startServerCmd.
func startServerCmd(t *testing.T, dataDir string, cmd *exec.Cmd) *server {
	t.Helper()
	return waitReady(t, launchCmd(t, dataDir, cmd))
}

// useAddress points s's kubeconfig, config and client at url: the server's
// kubeconfig names loopback, which is the server's namespace's own.
func (s *server) useAddress(t *testing.T, url string) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = url
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	s.kubeconfig = path
	if s.config, err = clientcmd.BuildConfigFromFlags("", path); err != nil {
		t.Fatal(err)
	}
	s.client = kubernetes.NewForConfigOrDie(s.config)
}

// startAgentCmd starts a prepared agent command; it is killed when t ends.
func startAgentCmd(t *testing.T, cmd *exec.Cmd) *agentProc {
	t.Helper()
	return startAgentOwned(t, t, cmd)
}

// startAgent starts the cluster's agent again with its flags; it runs
// until the cluster's test ends (not the subtest that started it).
func (c *twoNodeCluster) startAgent(t *testing.T) *agentProc {
	t.Helper()
	return startAgentOwned(t, c.owner, nsenterCmd(c.AgentNS, c.agentArgs...))
}

// startAgentOwned is startAgentCmd whose agent owner's end kills.
func startAgentOwned(t, owner *testing.T, cmd *exec.Cmd) *agentProc {
	t.Helper()
	a := &agentProc{cmd: cmd, output: &syncBuffer{}, exited: make(chan struct{})}
	a.cmd.Stdout, a.cmd.Stderr = a.output, a.output
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.err = a.cmd.Wait(); close(a.exited) }()
	owner.Cleanup(func() {
		a.kill()
		if owner.Failed() {
			t.Logf("agent output:\n%s", tail(a.output.String()))
		}
	})
	a.mustKeepRunning(owner) // after the kill above is registered: runs before it
	return a
}

// restartAgent kills the agent process (SIGKILL, as a crash) and starts it
// again with the same flags.
func (c *twoNodeCluster) restartAgent(t *testing.T) {
	t.Helper()
	c.Agent.kill()
	c.Agent = c.startAgent(t)
}

// kubectl runs kubectl against the cluster.
func (c *twoNodeCluster) kubectl(args ...string) (string, error) { return c.Server.kubectl(args...) }

// podExec runs a command in a pod's container (kubectl exec) and returns
// its standard output; kubectl's own warnings on stderr go to the error.
func (c *twoNodeCluster) podExec(pod string, cmd ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr strings.Builder
	kc := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", c.Server.kubeconfig, "exec", pod, "--"}, cmd...)...)
	kc.Stderr = &stderr
	out, err := kc.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl exec %s -- %s: %v: %s", pod, strings.Join(cmd, " "), err, stderr.String())
	}
	return string(out), nil
}

// runPod starts a busybox pod on node running script and waits until it
// runs; it returns the pod's IP.
func (c *twoNodeCluster) runPod(t *testing.T, name, node, script string, labels map[string]string) string {
	t.Helper()
	var lbl []string
	for k, v := range labels {
		lbl = append(lbl, k+"="+v)
	}
	lbl = append(lbl, "app="+name)
	overrides := fmt.Sprintf(`{"apiVersion":"v1","spec":{"nodeName":%q}}`, node)
	if out, err := c.kubectl("run", name, "--image="+testimage.DefaultBusyboxName, "--restart=Never",
		"--labels="+strings.Join(lbl, ","), "--overrides="+overrides, "--command", "--", "sh", "-c", script); err != nil {
		t.Fatalf("kubectl run %s: %v\n%s", name, err, out)
	}
	pods := runningPods(t, c.Server, name, 1)
	return pods[0].Status.PodIP
}

// webScript serves "<name>" on port 8080 with busybox httpd.
func webScript(name string) string {
	return fmt.Sprintf("mkdir -p /www && echo %s > /www/index.html && exec httpd -f -p 8080 -h /www", name)
}

// fetch runs busybox wget in pod against url, bounded by busybox timeout
// (busybox 1.35's wget -T segfaults after a successful fetch).
func (c *twoNodeCluster) fetch(pod, url string) (string, error) {
	out, err := c.podExec(pod, "timeout", "5", "wget", "-q", "-O", "-", url)
	return strings.TrimSpace(out), err
}

// eventuallyFetch waits until pod fetches want from url.
func (c *twoNodeCluster) eventuallyFetch(t *testing.T, pod, url, want string) {
	t.Helper()
	eventually(t, 90*time.Second, pod+" fetches "+url, func(context.Context) (bool, error) {
		got, err := c.fetch(pod, url)
		if err != nil {
			return false, fmt.Errorf("%v: %s", err, got)
		}
		return got == want, fmt.Errorf("got %q, want %q", got, want)
	})
}
