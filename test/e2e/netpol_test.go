package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// netnsNode starts a server that is its own node inside a network namespace
// the test creates: containerd and the server run there through `nsenter
// --net` (not `ip netns exec`, which also makes a mount namespace that would
// hide the kubelet's mounts from containerd), so the pod bridge, the
// policy table and the sysctls are the namespace's, never the host's. The
// namespace reaches the host over a veth pair; the server listens on the
// namespace's end, where the test's clients reach it. It is one function
// so that a multi-node harness can replace it.
func netnsNode(t *testing.T, node string, args ...string) *server {
	t.Helper()
	testLinkMu.Lock()
	n := testLinkNext % 250
	testLinkNext++
	testLinkMu.Unlock()
	ns := fmt.Sprintf("ep-np-%d-%d", os.Getpid(), n)
	host := fmt.Sprintf("epn%dh%d", os.Getpid()%10000, n)
	hostIP, nodeIP := fmt.Sprintf("10.202.%d.1", n), fmt.Sprintf("10.202.%d.2", n)
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ipCmd(t, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
	ipCmd(t, "addr", "add", hostIP+"/30", "dev", host)
	ipCmd(t, "link", "set", host, "up")
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	ipCmd(t, "-n", ns, "addr", "add", nodeIP+"/30", "dev", "eth0")
	ipCmd(t, "-n", ns, "link", "set", "eth0", "up")
	ipCmd(t, "-n", ns, "route", "add", "default", "via", hostIP)

	cgroupRoot := testCgroupRoot(t, ns)
	ctrd := testcontainerd.Start(t, testcontainerd.Options{Netns: ns})
	for _, line := range strings.Split(ctrd.Log(), "\n") {
		if strings.Contains(line, "failed to load plugin io.containerd.grpc.v1.cri") {
			// Seen when other processes of the host held all of root's
			// inotify instances (fs.inotify.max_user_instances, 128).
			testenv.Require(t, "containerd's CRI plugin (with \"too many open files\": free inotify instances or raise fs.inotify.max_user_instances)", errors.New(line))
		}
	}
	dataDir := t.TempDir()
	unmountUnder(t, dataDir)
	writeAirgapImages(t, filepath.Join(dataDir, "agent", "images"))
	nodeArgs := append([]string{
		// On every address of the namespace (the controller-manager and
		// the node dial loopback), its own end of the veth among them.
		"--bind-address", "0.0.0.0", "--tls-san", nodeIP,
		"--container-runtime-endpoint", ctrd.Endpoint,
		"--cni-conf-dir", ctrd.CNIConfDir,
		"--pause-image", testimage.DefaultPauseName,
		"--node-name", node,
		"--node-ip", nodeIP,
		"--kubelet-arg=cgroup-root=" + cgroupRoot,
	}, args...)
	cmd := command(dataDir, nodeArgs...)
	cmd = exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns, "--", cmd.Path}, cmd.Args[1:]...)...)
	s := waitReady(t, launchCmd(t, dataDir, cmd))
	// The kubeconfig names the namespace's loopback: reach the same port
	// at the namespace's veth address from here.
	data, err := os.ReadFile(s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "https://127.0.0.1:") {
		t.Fatalf("%s: no https://127.0.0.1: server:\n%s", s.kubeconfig, data)
	}
	s.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(s.kubeconfig, []byte(strings.ReplaceAll(string(data), "https://127.0.0.1:", "https://"+nodeIP+":")), 0o600); err != nil {
		t.Fatal(err)
	}
	s.config.Host = strings.Replace(s.config.Host, "127.0.0.1", nodeIP, 1)
	s.client = kubernetes.NewForConfigOrDie(s.config)
	waitNodeReady(t, s, node)
	return s
}

// TestNetworkPolicy: on a real node (kubelet, containerd, busybox pods on
// the CNI bridge), a NetworkPolicy that denies ingress to a pod stops a
// client pod's connections to it, and deleting the policy lets them through
// again. The two pods share the node's bridge, so this also shows that
// bridged traffic reaches the policy table.
func TestNetworkPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containerd, a server and its kubelet in a network namespace")
	}
	parallelNode(t)
	s := netnsNode(t, "np-1")
	if out, err := s.kubectl("run", "np-web", "--image="+testimage.DefaultBusyboxName, "--labels=app=np-web", "--command", "--",
		"sh", "-c", "mkdir -p /www; echo served > /www/index.html; exec httpd -f -p 8080 -h /www"); err != nil {
		t.Fatalf("kubectl run np-web: %v\n%s", err, out)
	}
	if out, err := s.kubectl("run", "np-client", "--image="+testimage.DefaultBusyboxName, "--labels=app=np-client", "--command", "--",
		"sleep", "3600"); err != nil {
		t.Fatalf("kubectl run np-client: %v\n%s", err, out)
	}
	web := runningPods(t, s, "np-web", 1)[0]
	runningPods(t, s, "np-client", 1)
	url := "http://" + web.Status.PodIP + ":8080/"

	// fetch reports whether the client gets the page within 3 s. (Not
	// wget -T: this busybox's wget (Debian 1.35.0 static) segfaults with
	// it; timeout's exit code 143 is the give-up.)
	fetch := func() (bool, error) {
		out, err := s.kubectl("exec", "np-client", "--", "timeout", "3", "wget", "-q", "-O", "-", url)
		switch {
		case err == nil && strings.TrimSpace(out) == "served":
			return true, nil
		case err != nil && strings.Contains(out, "exit code 143"):
			return false, nil
		default:
			return false, fmt.Errorf("wget %s: %v: %s", url, err, out)
		}
	}
	reachable := func(want bool) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			got, err := fetch()
			if err != nil {
				return false, err
			}
			return got == want, fmt.Errorf("reachable=%v, want %v", got, want)
		}
	}
	eventually(t, time.Minute, "the client to reach the web pod", reachable(true))

	policy := `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-web, namespace: default}
spec:
  podSelector: {matchLabels: {app: np-web}}
  policyTypes: [Ingress]
`
	if out, err := s.kubectlStdin(policy, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	eventually(t, time.Minute, "the policy to stop the client", reachable(false))

	if out, err := s.kubectl("delete", "networkpolicy", "deny-web"); err != nil {
		t.Fatalf("kubectl delete networkpolicy: %v\n%s", err, out)
	}
	eventually(t, time.Minute, "the client to reach the web pod again", reachable(true))
}

// kubectlStdin runs kubectl against s with stdin.
func (s *server) kubectlStdin(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// testCgroupRoot makes a cgroup of the test's own in every hierarchy and
// returns it, for the kubelet's cgroup-root: a kubelet removes the pod
// cgroups under its root that it does not know, so two kubelets of one host
// sharing the default root (/kubepods) kill each other's pods (seen here:
// sandboxes stopped a second after they started while another test's
// kubelet ran). Removed, deepest first, when the test ends.
func testCgroupRoot(t *testing.T, name string) string {
	t.Helper()
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		t.Fatalf("cgroups: %v", err)
	}
	seen := map[string]bool{}
	var made []string
	t.Cleanup(func() {
		for _, dir := range made {
			var all []string
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					all = append(all, p)
				}
				return nil
			})
			for i := len(all) - 1; i >= 0; i-- {
				_ = os.Remove(all[i])
			}
		}
	})
	for _, e := range entries {
		hier, err := filepath.EvalSymlinks(filepath.Join("/sys/fs/cgroup", e.Name()))
		if err != nil || seen[hier] {
			continue
		}
		seen[hier] = true
		if _, err := os.Stat(filepath.Join(hier, "cgroup.procs")); err != nil {
			continue // not a hierarchy
		}
		dir := filepath.Join(hier, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("cgroups: %v", err)
		}
		made = append(made, dir)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} { // empty in a new cpuset cgroup
			if v, err := os.ReadFile(filepath.Join(hier, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					t.Fatalf("cgroups: %v", err)
				}
			}
		}
	}
	return "/" + name
}
