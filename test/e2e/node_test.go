package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	cri "k8s.io/cri-client/pkg"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// nodeServer starts a server that is its own node on a private containerd,
// with the test images in its airgap directory, and waits for the node to
// be Ready.
func nodeServer(t *testing.T, args ...string) (*server, *testcontainerd.Containerd, []string) {
	t.Helper()
	return nodeServerWith(t, nodeServerOptions{}, args...)
}

// nodeServerOptions vary nodeServer.
type nodeServerOptions struct {
	// images go into the airgap directory besides busybox and pause.
	images []testimage.Image
}

func nodeServerWith(t *testing.T, o nodeServerOptions, args ...string) (*server, *testcontainerd.Containerd, []string) {
	t.Helper()
	ctrd := testcontainerd.Start(t, testcontainerd.Options{})
	dataDir := t.TempDir()
	unmountUnder(t, dataDir)
	writeAirgapImages(t, filepath.Join(dataDir, "agent", "images"), o.images...)
	nodeIP := testNodeIP(t)
	nodeArgs := append([]string{
		"--container-runtime-endpoint", ctrd.Endpoint,
		"--cni-conf-dir", ctrd.CNIConfDir,
		"--pause-image", testimage.DefaultPauseName,
		"--node-name", "edge-1",
		"--node-ip", nodeIP,
		"--pod-logs-dir", filepath.Join(dataDir, "pod-logs"),
	}, kubeletPorts(t)...)
	// The API on every address, advertised at the node's: a server bound
	// to loopback, where its pods cannot connect, refuses to be a node
	// (pkg/bootstrap/apiendpoint.go).
	nodeArgs = append(nodeArgs, "--bind-address", "0.0.0.0", "--advertise-address", nodeIP)
	nodeArgs = append(nodeArgs, args...)
	s := startServer(t, dataDir, nodeArgs...)
	s.mustKeepRunning(t)
	waitNodeReady(t, s, "edge-1")
	return s, ctrd, nodeArgs
}

// kubeletPorts gives a test's kubelet ports that were free a moment ago, so
// that it never meets another kubelet of this host on upstream's 10250.
func kubeletPorts(t *testing.T) []string {
	return []string{"--kubelet-arg=port=" + freePort(t), "--kubelet-arg=healthz-port=" + freePort(t)}
}

// writeAirgapImages puts the workload and sandbox images, and extra, in dir.
func writeAirgapImages(t *testing.T, dir string, extra ...testimage.Image) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, img := range append([]testimage.Image{testimage.Busybox(), testimage.Pause()}, extra...) {
		if _, err := testimage.Write(dir, img); err != nil {
			t.Fatal(err)
		}
	}
}

func waitNodeReady(t *testing.T, s *server, name string) {
	t.Helper()
	eventually(t, 3*time.Minute, "node "+name+" Ready", func(ctx context.Context) (bool, error) {
		n, err := s.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status != corev1.ConditionTrue {
					return false, fmt.Errorf("Ready=%s: %s", c.Status, c.Message)
				}
				return true, nil
			}
		}
		return false, fmt.Errorf("no Ready condition yet")
	})
}

// runningPods waits until want pods with the label app=<app> run and
// returns them.
func runningPods(t *testing.T, s *server, app string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	eventually(t, 3*time.Minute, fmt.Sprintf("%d running pods of %s", want, app), func(ctx context.Context) (bool, error) {
		list, err := s.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(labels.Set{"app": app}).String(),
		})
		if err != nil {
			return false, err
		}
		pods = pods[:0]
		var states []string
		for _, p := range list.Items {
			states = append(states, p.Name+"="+string(p.Status.Phase)+podReason(p))
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
		}
		if len(pods) == want && len(list.Items) == want {
			return true, nil
		}
		return false, fmt.Errorf("pods: %s", strings.Join(states, ", "))
	})
	return pods
}

func podReason(p corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return "(" + w.Reason + ": " + w.Message + ")"
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return "(" + c.Message + ")"
		}
	}
	return ""
}

// criContainers lists the containers containerd runs for pods of app.
func criContainers(t *testing.T, ctrd *testcontainerd.Containerd, app string) []*criapi.Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := cri.NewRemoteRuntimeService(ctx, ctrd.Endpoint, 10*time.Second, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	list, err := rs.ListContainers(ctx, &criapi.ContainerFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*criapi.Container
	for _, c := range list {
		if strings.HasPrefix(c.Labels["io.kubernetes.pod.name"], app+"-") {
			out = append(out, c)
		}
	}
	return out
}

// TestNodeServer: with a container runtime, the server is a Ready node; a
// Deployment's pods run with pod-network addresses; kubectl logs, exec and
// port-forward work through the kubelet's verified serving certificate; a
// restart keeps the node and its containers; deleting the Deployment
// removes its containers.
func TestNodeServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containerd, a server and its kubelet")
	}
	parallelNode(t)
	s, ctrd, nodeArgs := nodeServer(t)

	node, err := s.client.CoreV1().Nodes().Get(context.Background(), "edge-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.PodCIDR == "" {
		t.Fatalf("node edge-1 has no pod CIDR")
	}

	if out, err := s.kubectl("create", "deployment", "web", "--image="+testimage.DefaultBusyboxName, "--replicas=2",
		"--", "sh", "-c", "echo hello from $(hostname); mkdir -p /www; echo served > /www/index.html; exec httpd -f -p 8080 -h /www"); err != nil {
		t.Fatalf("kubectl create deployment: %v\n%s", err, out)
	}
	pods := runningPods(t, s, "web", 2)
	for _, p := range pods {
		if !podCIDRHolds(node.Spec.PodCIDR, p.Status.PodIP) {
			t.Errorf("pod %s has IP %q, not from the node's pod CIDR %s", p.Name, p.Status.PodIP, node.Spec.PodCIDR)
		}
	}
	pod := pods[0].Name

	eventually(t, time.Minute, "kubectl logs", func(context.Context) (bool, error) {
		out, err := s.kubectl("logs", pod)
		if err != nil {
			return false, fmt.Errorf("%v: %s", err, out)
		}
		return strings.Contains(out, "hello from "+pod), fmt.Errorf("logs: %q", out)
	})
	if out, err := s.kubectl("exec", pod, "--", "hostname"); err != nil || strings.TrimSpace(out) != pod {
		t.Fatalf("kubectl exec hostname = %q, %v; want %s", out, err, pod)
	}
	portForward(t, s, pod)

	before := criContainers(t, ctrd, "web")
	if len(before) != 2 {
		t.Fatalf("containerd runs %d web containers, want 2", len(before))
	}

	// A restart keeps the node and its running pods: no container restarts.
	s.stop()
	s2 := startServer(t, s.dataDir, nodeArgs...)
	waitNodeReady(t, s2, "edge-1")
	after := runningPods(t, s2, "web", 2)
	for _, p := range after {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("pod %s: container restarted %d times across the server restart", p.Name, cs.RestartCount)
			}
		}
	}
	if got := criContainers(t, ctrd, "web"); !sameContainers(before, got) {
		t.Errorf("containers changed across the restart: before %v, after %v", ids(before), ids(got))
	}

	if out, err := s2.kubectl("delete", "deployment", "web", "--wait=true"); err != nil {
		t.Fatalf("kubectl delete deployment: %v\n%s", err, out)
	}
	eventually(t, 2*time.Minute, "web containers removed from containerd", func(context.Context) (bool, error) {
		left := criContainers(t, ctrd, "web")
		return len(left) == 0, fmt.Errorf("still there: %v", ids(left))
	})
}

// portForward forwards a local port to the pod's 8080 and fetches the page.
func portForward(t *testing.T, s *server, pod string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", s.kubeconfig, "port-forward", "--address", "127.0.0.1", pod, ":8080")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	line := make(chan string, 1)
	go func() {
		buf := make([]byte, 512)
		n, _ := stdout.Read(buf)
		line <- string(buf[:n])
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var first string
	select {
	case first = <-line:
	case <-ctx.Done():
		t.Fatalf("kubectl port-forward printed nothing: %s", stderr.String())
	}
	m := regexp.MustCompile(`127\.0\.0\.1:(\d+)`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("kubectl port-forward: no local port in %q (%s)", first, stderr.String())
	}
	eventually(t, time.Minute, "a page through port-forward", func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+m[1]+"/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(body)) == "served", fmt.Errorf("got %d %q", resp.StatusCode, body)
	})
}

func podCIDRHolds(cidr, ip string) bool {
	_, n, err := net.ParseCIDR(cidr)
	return err == nil && n.Contains(net.ParseIP(ip))
}

func sameContainers(a, b []*criapi.Container) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, c := range a {
		seen[c.Id] = true
	}
	for _, c := range b {
		if !seen[c.Id] {
			return false
		}
	}
	return true
}

func ids(cs []*criapi.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Id[:12]+"/"+c.State.String())
	}
	return out
}

// TestNodeServerEtcd: the same node on embedded etcd: Ready, a pod runs,
// and its log comes back through the kubelet.
func TestNodeServerEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containerd, a server on embedded etcd and its kubelet")
	}
	parallelNode(t)
	s, _, _ := nodeServer(t, "--datastore=etcd")
	if out, err := s.kubectl("run", "one", "--image="+testimage.DefaultBusyboxName, "--labels=app=one", "--restart=Never", "--command",
		"--", "sh", "-c", "echo on etcd; exec sleep 3600"); err != nil {
		t.Fatalf("kubectl run: %v\n%s", err, out)
	}
	runningPods(t, s, "one", 1)
	eventually(t, time.Minute, "kubectl logs", func(context.Context) (bool, error) {
		out, err := s.kubectl("logs", "one")
		if err != nil {
			return false, fmt.Errorf("%v: %s", err, out)
		}
		return strings.Contains(out, "on etcd"), fmt.Errorf("logs: %q", out)
	})
}
