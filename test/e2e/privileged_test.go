package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// What refuses a privileged container, word for word.
const (
	// The API server's validation with --allow-privileged=false, and the
	// kubelet's for a static pod (same upstream code).
	privilegedRefused = "securityContext.privileged: Forbidden: disallowed by cluster policy"
	// Pod Security admission in a namespace that enforces baseline.
	privilegedBaseline = `violates PodSecurity "baseline:latest": privileged`
)

// privilegedPod is a busybox pod whose container is privileged, bound to node.
func privilegedPod(name, namespace, node string) *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name: "c", Image: testimage.DefaultBusyboxName, ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sleep", "3600"},
				SecurityContext: &corev1.SecurityContext{Privileged: &yes},
			}},
		},
	}
}

// writeStaticPods puts two static pods in dir: priv-static, privileged, and
// plain-static, not, which shows that the kubelet reads dir.
func writeStaticPods(t *testing.T, dir string) {
	t.Helper()
	for _, p := range []struct {
		name       string
		privileged bool
	}{{"priv-static", true}, {"plain-static", false}} {
		manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    securityContext:
      privileged: %t
`, p.name, testimage.DefaultBusyboxName, p.privileged)
		if err := os.WriteFile(filepath.Join(dir, p.name+".yaml"), []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// waitContainers waits until containerd runs n containers of the pods
// whose names start with prefix+"-" (a static pod's is <name>-<node>).
// It asks containerd, not the API: a static pod runs without its mirror
// pod, which the API server may refuse.
func waitContainers(t *testing.T, ctrd *testcontainerd.Containerd, prefix string, n int) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("%d running containers of %s", n, prefix), func(context.Context) (bool, error) {
		running := 0
		for _, c := range criContainers(t, ctrd, prefix) {
			if c.State.String() == "CONTAINER_RUNNING" {
				running++
			}
		}
		return running == n, fmt.Errorf("%d running", running)
	})
}

// waitManifestRefused waits until the kubelet whose log is output refuses
// the static pod manifest <name>.yaml as privileged: its file source logs
// "Could not process manifest file" with the validation error, and never
// runs the pod. (A kubelet that ran it would log the same validation error
// for the mirror pod, which the API server refuses: not that line.)
func waitManifestRefused(t *testing.T, output *syncBuffer, ctrd *testcontainerd.Containerd, name string) {
	t.Helper()
	eventually(t, time.Minute, "the kubelet's refusal of "+name+".yaml in its log", func(context.Context) (bool, error) {
		for _, line := range strings.Split(output.String(), "\n") {
			if strings.Contains(line, "Could not process manifest file") && strings.Contains(line, privilegedRefused) &&
				strings.Contains(line, "/"+name+".yaml") {
				return true, nil
			}
		}
		return false, fmt.Errorf("not logged; containerd has %d containers of %s", len(criContainers(t, ctrd, name)), name)
	})
}

// waitPodRunning waits until the pod runs.
func waitPodRunning(t *testing.T, client kubernetes.Interface, namespace, name string) {
	t.Helper()
	eventually(t, 2*time.Minute, "pod "+namespace+"/"+name+" running", func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s%s", p.Status.Phase, podReason(*p))
	})
}

// wantPrivileged checks that the pod's container holds CAP_SYS_ADMIN, which
// only a privileged container (or one granted it) has.
func wantPrivileged(t *testing.T, s *server, pod string) {
	t.Helper()
	out, err := s.kubectl("exec", pod, "--", "grep", "CapEff", "/proc/self/status")
	if err != nil {
		t.Fatalf("kubectl exec %s: %v\n%s", pod, err, out)
	}
	hex := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "CapEff:"))
	caps, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		t.Fatalf("CapEff of %s: %q: %v", pod, out, err)
	}
	const capSysAdmin = 21
	if caps&(1<<capSysAdmin) == 0 {
		t.Fatalf("pod %s runs without CAP_SYS_ADMIN (CapEff %s): not privileged", pod, hex)
	}
}

// wantCreateRefused creates pod and expects the refusal want.
func wantCreateRefused(t *testing.T, client kubernetes.Interface, pod *corev1.Pod, want string) {
	t.Helper()
	_, err := client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("create privileged pod %s/%s: %v; want it refused with %q", pod.Namespace, pod.Name, err, want)
	}
}

// wantNodeConfigPrivileged checks what the server tells agents.
func wantNodeConfigPrivileged(t *testing.T, client kubernetes.Interface, want bool) {
	t.Helper()
	nc, err := nodeconfig.Fetch(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	if nc.AllowPrivileged != want {
		t.Fatalf("%s/%s says allow-privileged %v, want %v", nodeconfig.Namespace, nodeconfig.Name, nc.AllowPrivileged, want)
	}
}

// TestPrivilegedPods, on a server that is its own node: by default a
// privileged pod runs, through the API as a static pod, and a namespace
// that enforces Pod Security baseline refuses it. Restarted with
// --allow-privileged=false, the API server refuses it with upstream's
// message, and so does the kubelet for the static pod, which it stops; the
// pod admitted before runs on.
func TestPrivilegedPods(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containerd, a server and its kubelet")
	}
	parallelNode(t)
	manifests := t.TempDir()
	writeStaticPods(t, manifests)
	s, ctrd, nodeArgs := nodeServer(t, "--kubelet-arg=pod-manifest-path="+manifests)
	ctx := context.Background()

	// Allowed by default: the API server and the kubelet, which in one
	// process share upstream's process-wide setting.
	waitContainers(t, ctrd, "plain-static", 1)
	waitContainers(t, ctrd, "priv-static", 1)
	if _, err := s.client.CoreV1().Pods("default").Create(ctx, privilegedPod("api-priv", "default", "edge-1"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a privileged pod with the default --allow-privileged: %v", err)
	}
	waitPodRunning(t, s.client, "default", "api-priv")
	wantPrivileged(t, s, "api-priv")
	waitPodRunning(t, s.client, "default", "priv-static-edge-1") // its mirror pod
	wantNodeConfigPrivileged(t, s.client, true)

	// Pod Security admission, per namespace, refuses it all the same.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "baseline", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}
	if _, err := s.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantCreateRefused(t, s.client, privilegedPod("api-priv", "baseline", "edge-1"), privilegedBaseline)

	// Refused with --allow-privileged=false.
	before := criContainers(t, ctrd, "api") // api-priv's
	if len(before) != 1 {
		t.Fatalf("containerd runs %d containers of pod api-priv, want 1", len(before))
	}
	s.stop()
	s = startServer(t, s.dataDir, append(nodeArgs, "--allow-privileged=false")...)
	waitNodeReady(t, s, "edge-1")
	wantCreateRefused(t, s.client, privilegedPod("api-priv2", "default", "edge-1"), "spec.containers[0]."+privilegedRefused)
	wantNodeConfigPrivileged(t, s.client, false)
	// A pod the API server admitted before keeps running, as upstream's
	// kubelet leaves pods from the API server to its checks.
	waitPodRunning(t, s.client, "default", "api-priv")
	if after := criContainers(t, ctrd, "api"); !sameContainers(before, after) {
		t.Errorf("pod api-priv's containers changed across the restart: before %v, after %v", ids(before), ids(after))
	}
	// The kubelet refuses the static pod, bypassing the API server, and
	// stops the container it ran before; the other static pod runs on.
	waitContainers(t, ctrd, "priv-static", 0)
	waitManifestRefused(t, s.output, ctrd, "priv-static")
	waitContainers(t, ctrd, "plain-static", 1)
	waitPodRunning(t, s.client, "default", "plain-static-edge-1")
}

// TestPrivilegedPodsAgent: a server with --allow-privileged=false tells its
// agents (kube-system/edgeplane-node-config), whose kubelet then refuses a
// privileged static pod, which never reaches the API server; a privileged
// pod bound to the agent through the API is refused there.
func TestPrivilegedPodsAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two nodes, each with its containerd, in network namespaces")
	}
	parallelNode(t, buildClusterImages(t))
	manifests := t.TempDir()
	writeStaticPods(t, manifests)
	c := startTwoNodeCluster(t, twoNodeOptions{
		ServerArgs: []string{"--allow-privileged=false"},
		AgentArgs:  []string{"--kubelet-arg=pod-manifest-path=" + manifests},
	})
	wantNodeConfigPrivileged(t, c.Server.client, false)
	waitContainers(t, c.AgentCtrd, "plain-static", 1)
	waitPodRunning(t, c.Server.client, "default", "plain-static-"+c.AgentNode)
	waitManifestRefused(t, c.Agent.output, c.AgentCtrd, "priv-static")
	if got := criContainers(t, c.AgentCtrd, "priv-static"); len(got) != 0 {
		t.Fatalf("the agent runs %d containers of the privileged static pod", len(got))
	}
	wantCreateRefused(t, c.Server.client, privilegedPod("api-priv", "default", c.AgentNode), "spec.containers[0]."+privilegedRefused)
}
