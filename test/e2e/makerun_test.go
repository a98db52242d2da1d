package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// makeRunArgs returns the arguments of the Makefile's `run` recipe after the
// binary (`server ...`), as `make -n run` prints them with ARGS=args, and
// with the data dir replaced by dataDir: the Makefile's own flags, not a
// copy of them.
func makeRunArgs(t *testing.T, dataDir, args string) []string {
	t.Helper()
	const binMark, dirMark = "EDGEPLANE_TEST_BIN", "EDGEPLANE_TEST_DATA_DIR"
	out, err := exec.Command("make", "-n", "-s", "--no-print-directory", "-C", "../..", "run",
		"BIN="+binMark, "DATA_DIR="+dirMark, "ARGS="+args).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n run: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != binMark {
			continue
		}
		if strings.ContainsAny(line, `'"\$`) {
			t.Fatalf("the run recipe quotes or expands what this test does not parse: %s", line)
		}
		if f[1] != "server" {
			t.Fatalf("the run recipe does not run `edgeplane server`: %s", line)
		}
		for i := range f {
			f[i] = strings.ReplaceAll(f[i], dirMark, dataDir)
		}
		return f[1:]
	}
	t.Fatalf("make -n run printed no command of the binary:\n%s", out)
	return nil
}

// nodeNetns is a network namespace of the test's own on a bridge of the
// host, with a default route through the host's address on the bridge:
// a host as `make run` meets it (the advertise address is the default
// route's interface's), whose kube-proxy rules stay in the namespace.
type nodeNetns struct {
	ns, hostIP, nodeIP string
}

func newNodeNetns(t *testing.T) nodeNetns {
	t.Helper()
	clusterNetMu.Lock()
	n := clusterNetNext % 200
	clusterNetNext++
	clusterNetMu.Unlock()
	pid := os.Getpid()
	nn := nodeNetns{ns: fmt.Sprintf("ep-run-%d-%d", pid, n),
		hostIP: fmt.Sprintf("10.205.%d.1", n), nodeIP: fmt.Sprintf("10.205.%d.2", n)}
	bridge := fmt.Sprintf("epm%d-%d", pid%100000, n)
	veth := fmt.Sprintf("epmv%d-%d", pid%100000, n)
	ipCmd(t, "link", "add", bridge, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	ipCmd(t, "addr", "add", nn.hostIP+"/24", "dev", bridge)
	ipCmd(t, "link", "set", bridge, "up")
	ipCmd(t, "netns", "add", nn.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nn.ns).Run() })
	ipCmd(t, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", nn.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", veth).Run() })
	ipCmd(t, "link", "set", veth, "master", bridge, "up")
	ipCmd(t, "-n", nn.ns, "addr", "add", nn.nodeIP+"/24", "dev", "eth0")
	ipCmd(t, "-n", nn.ns, "link", "set", "eth0", "up")
	ipCmd(t, "-n", nn.ns, "link", "set", "lo", "up")
	ipCmd(t, "-n", nn.ns, "route", "add", "default", "via", nn.hostIP)
	return nn
}

// TestMakeRun runs `make run`'s server (the Makefile's flags, read with
// make -n) on a host with a container runtime, for both README forms
// (`make run`, `make run ARGS=--datastore=etcd`), and checks the README's
// promise: the node is Ready, CoreDNS is Ready, kubernetes.default resolves
// in a pod to 10.43.0.1, and an in-cluster client lists namespaces through
// the kubernetes Service; then that the start and the stop printed no
// error line. With the Makefile's former
// --bind-address 127.0.0.1 the kubernetes Service's endpoint was the
// host's address, where nothing listened: CoreDNS never got Ready. A server
// bound to loopback that finds a runtime now refuses to start, naming the
// flags and the fix.
//
// Only the node's own settings are added: the test's containerd, its
// images (no registry here: CoreDNS is the test build, hence
// --coredns-image), and the kubelet settings of every node test
// (agentKubeletArgs). The server runs in a network namespace of its own,
// so its kube-proxy and flannel rules stay there.
func TestMakeRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds CoreDNS, runs containerd and the server as a node")
	}
	parallelNode(t, buildClusterImages(t))
	nn := newNodeNetns(t)
	// Each server gets a containerd of its own, as a new host would: one
	// shared across the forms would hand the second server's kubelet the
	// first one's containers, whose log files are in the first kubelet's
	// --pod-logs-dir, and its stats loop logs an error for each.
	nodeArgs := func(t *testing.T, dataDir string) []string {
		ctrd := testcontainerd.Start(t, testcontainerd.Options{Netns: nn.ns})
		clusterImages(t, filepath.Join(dataDir, "agent", "images"), true)
		return append([]string{
			"--container-runtime-endpoint", ctrd.Endpoint, "--cni-conf-dir", ctrd.CNIConfDir,
			"--pause-image", testimage.DefaultPauseName, "--node-name", "edge-run",
			"--coredns-image", testimage.DefaultCoreDNSName,
		}, agentKubeletArgs(t)...)
	}

	t.Run("a loopback bind address with a runtime is refused", func(t *testing.T) {
		dataDir := agentDataDir(t)
		args := append(makeRunArgs(t, dataDir, "--bind-address=127.0.0.1"), nodeArgs(t, dataDir)...)
		s := launchCmd(t, dataDir, nsenterCmd(nn.ns, args...))
		select {
		case <-s.exited:
		case <-s.ready:
			t.Fatalf("a server bound to 127.0.0.1 with a runtime started as a node:\n%s", tail(s.output.String()))
		case <-time.After(3 * time.Minute):
			t.Fatalf("no exit within 3 minutes:\n%s", tail(s.output.String()))
		}
		out := s.output.String()
		if s.exitErr == nil {
			t.Fatalf("exit 0, want a refusal:\n%s", tail(out))
		}
		for _, want := range []string{"--bind-address 127.0.0.1", "--advertise-address " + nn.nodeIP, "--bind-address 0.0.0.0", "--disable=kubelet"} {
			if !strings.Contains(out, want) {
				t.Errorf("the refusal does not name %q:\n%s", want, tail(out))
			}
		}
	})

	for _, tc := range []struct{ name, makeArgs string }{
		{"make run", ""},
		{"make run ARGS=--datastore=etcd", "--datastore=etcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := agentDataDir(t)
			args := append(makeRunArgs(t, dataDir, tc.makeArgs), nodeArgs(t, dataDir)...)
			s := startServerCmd(t, dataDir, nsenterCmd(nn.ns, args...))
			s.useAddress(t, "https://"+nn.nodeIP+":6443")
			checkMakeRunCluster(t, s, nn.nodeIP)
			s.stop()
			if lines := errorLines(s.output.String(), thisMachine...); len(lines) > 0 {
				t.Errorf("%d error lines from start to stop:\n%s", len(lines), strings.Join(lines, "\n"))
			}
		})
	}
}

// thisMachine are the kubelet's error lines that these test machines cause
// and a host the product runs on does not: the test sandbox refuses what
// root may do elsewhere, and other tests' kubelets share the host's
// /var/log/containers.
var thisMachine = []string{
	// RLIMIT_NOFILE cannot be raised in the sandbox.
	`"Failed to set rlimit on max file handles" err="operation not permitted"`,
	// /proc/1/ns/pid cannot be read in the sandbox.
	`"Failed to ensure process in container with oom score" err="failed to find pid namespace of init process"`,
	// The kubelet's container GC asks its runtime about every dead
	// symlink in the host's /var/log/containers: other tests' containers.
	`"ContainerStatus from runtime service failed" err="rpc error: code = NotFound`,
}

// checkMakeRunCluster checks the README's promise on a server that is its
// own node "edge-run" at nodeIP.
func checkMakeRunCluster(t *testing.T, s *server, nodeIP string) {
	t.Helper()
	waitNodeReady(t, s, "edge-run")
	eventually(t, time.Minute, "the kubernetes endpoint "+nodeIP, func(ctx context.Context) (bool, error) {
		ips, err := endpointIPs(ctx, s)
		return slices.Equal(ips, []string{nodeIP}), fmt.Errorf("endpoints %v, %v", ips, err)
	})
	eventually(t, 3*time.Minute, "a Ready CoreDNS pod", func(ctx context.Context) (bool, error) {
		pods, err := s.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil {
			return false, err
		}
		var states []string
		for _, p := range pods.Items {
			states = append(states, p.Name+"="+string(p.Status.Phase)+podReason(p))
			if p.DeletionTimestamp == nil && podReady(p) {
				return true, nil
			}
		}
		return false, fmt.Errorf("pods: %s", strings.Join(states, ", "))
	})

	if out, err := s.kubectl("run", "client", "--image="+testimage.DefaultBusyboxName, "--restart=Never", "--command", "--", "sleep", "3600"); err != nil {
		t.Fatalf("kubectl run: %v\n%s", err, out)
	}
	eventually(t, 3*time.Minute, "the client pod running", func(ctx context.Context) (bool, error) {
		p, err := s.client.CoreV1().Pods("default").Get(ctx, "client", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s%s", p.Status.Phase, podReason(*p))
	})

	// busybox's nslookup (1.35) applies no search list: it gets the whole
	// name; the in-cluster client's Go resolver reads resolv.conf as a
	// glibc pod's resolver would, so it gets the short one.
	t.Run("nslookup kubernetes.default.svc.cluster.local answers 10.43.0.1", func(t *testing.T) {
		eventually(t, time.Minute, "nslookup kubernetes.default.svc.cluster.local", func(context.Context) (bool, error) {
			out, err := s.kubectl("exec", "client", "--", "nslookup", "kubernetes.default.svc.cluster.local")
			if err != nil {
				return false, fmt.Errorf("%v: %s", err, out)
			}
			err = checkNslookup(out, "kubernetes.default.svc.cluster.local", "10.43.0.1")
			return err == nil, err
		})
	})
	t.Run("kubernetes.default resolves to 10.43.0.1 through the pod's search list", func(t *testing.T) {
		eventually(t, time.Minute, "kubernetes.default resolved in a pod", func(context.Context) (bool, error) {
			out, err := s.kubectl("exec", "client", "--", "incluster", "lookup", "kubernetes.default")
			if err != nil {
				return false, fmt.Errorf("%v: %s", err, out)
			}
			return slices.Equal(strings.Fields(out), []string{"10.43.0.1"}), fmt.Errorf("addresses %q", out)
		})
	})

	t.Run("an in-cluster client lists namespaces", func(t *testing.T) {
		for _, args := range [][]string{
			{"create", "clusterrole", "ns-reader", "--verb=list", "--resource=namespaces"},
			{"create", "clusterrolebinding", "default-ns-reader", "--clusterrole=ns-reader", "--serviceaccount=default:default"},
		} {
			if out, err := s.kubectl(args...); err != nil {
				t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		eventually(t, 90*time.Second, "the in-cluster client's namespaces", func(context.Context) (bool, error) {
			out, err := s.kubectl("exec", "client", "--", "incluster")
			if err != nil {
				return false, fmt.Errorf("%v: %s", err, out)
			}
			names := strings.Fields(out)
			return slices.Contains(names, "kube-system") && slices.Contains(names, "default"), fmt.Errorf("output %q", out)
		})
	})
}
