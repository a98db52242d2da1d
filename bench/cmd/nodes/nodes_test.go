package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// edgeplaneBinary is built once by TestMain with a plain `go build`.
var edgeplaneBinary string

func TestMain(m *testing.M) {
	// The fleets run this test binary again as each hollow node and as
	// each process of lite nodes.
	if len(os.Args) > 1 && os.Args[1] == hollowFlag {
		os.Exit(hollowMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == liteFlag {
		os.Exit(liteMain(os.Args[2:]))
	}
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "edgeplane-nodes-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	edgeplaneBinary = filepath.Join(dir, "edgeplane")
	build := exec.Command("go", "build", "-o", edgeplaneBinary, "../../../cmd/edgeplane")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build edgeplane:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var readyLine = regexp.MustCompile(`edgeplane ready in [0-9.]+ s, kubeconfig at ([^"\s]+)`)

// lockedBuffer is a server's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > 6000 {
		s = s[len(s)-6000:]
	}
	return s
}

// startEdgeplane starts a control-plane-only server on SQLite, on loopback
// and a port of the kernel's choosing, and returns its data dir and admin
// client once it says it is ready. It is killed at cleanup.
func startEdgeplane(t *testing.T, args ...string) (string, *kubernetes.Clientset) {
	t.Helper()
	dataDir := t.TempDir()
	cmd := exec.Command(edgeplaneBinary, append([]string{"server", "--data-dir", dataDir, "--bind-address", "127.0.0.1",
		"--https-port", "0", "--disable=kubelet", "--profile", "small"}, args...)...)
	out := &lockedBuffer{}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = out, io.MultiWriter(out, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if m := readyLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case ready <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("edgeplane output:\n%s", out.String())
		}
	})
	var kubeconfig string
	select {
	case kubeconfig = <-ready:
	case <-exited:
		t.Fatalf("edgeplane exited before ready:\n%s", out.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("edgeplane not ready after 3 minutes:\n%s", out.String())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return dataDir, kubernetes.NewForConfigOrDie(cfg)
}

// testHeartbeat is the server's --node-heartbeat in TestHollowNodes: not
// upstream's 10 s, so that the test proves the nodes' Lease and the node
// lifecycle controller's grace period follow the setting (the default's are
// upstream's own: pkg/nodeconfig TestDefaultHeartbeatIsUpstreams), and a
// dead node is found in 25 s instead of 50. nodeMonitorPeriod is how often
// the controller looks (upstream's 5 s).
const (
	testHeartbeat     = 5 * time.Second
	nodeMonitorPeriod = 5 * time.Second
)

// TestHollowNodes: five simulated nodes join a real server through their
// node token and TLS bootstrap, get Ready, run one pod each (a hard spread
// over nodes), and the one that is killed is marked NotReady within the
// node monitor grace period of the server's --node-heartbeat while the
// others stay Ready.
func TestHollowNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and five hollow kubelets")
	}
	const n = 5
	dataDir, cs := startEdgeplane(t, "--node-heartbeat="+testHeartbeat.String())
	tok, ok, err := nodetoken.ReadFile(dataDir)
	if err != nil || !ok {
		t.Fatalf("node token in %s: ok=%v err=%v", dataDir, ok, err)
	}
	kc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := newFleet(exe, t.TempDir(), kc.Host, tok.String(), "hollow")
	t.Cleanup(func() {
		if err := f.stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			for i := range n {
				t.Logf("hollow node %d:\n%s", i, f.logTail(i))
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	if err := f.startAll(n, 0); err != nil {
		t.Fatal(err)
	}
	dead := func() error {
		for i := range n {
			if !f.alive(i) {
				return fmt.Errorf("hollow node %s exited:\n%s", f.name(i), f.logTail(i))
			}
		}
		return nil
	}
	if err := waitNodesReady(ctx, cs, "hollow", n, 2*time.Minute, dead); err != nil {
		t.Fatal(err)
	}
	// Each took the server's heartbeat: its Lease (made soon after the node
	// registers) lasts four heartbeats; the kubelet renews it every quarter.
	for i := range n {
		var got *int32
		want := int32(nodeconfig.LeaseDuration(testHeartbeat) / time.Second)
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, f.name(i), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = lease.Spec.LeaseDurationSeconds
			return true, nil
		})
		if err != nil || got == nil || *got != want {
			t.Errorf("node %s's Lease lasts %v s (err %v), want %d", f.name(i), got, err, want)
		}
	}
	// Each joined through the node token: its client certificate came from
	// a CSR made with the bootstrap token, for its own node name.
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bootstrapped := map[string]bool{}
	for _, c := range csrs.Items {
		if c.Spec.Username == "system:bootstrap:"+tok.ID && len(c.Status.Certificate) > 0 {
			bootstrapped[c.Spec.SignerName] = true
		}
	}
	if !bootstrapped["kubernetes.io/kube-apiserver-client-kubelet"] {
		t.Errorf("no issued kubelet client CSR from system:bootstrap:%s among %d CSRs", tok.ID, len(csrs.Items))
	}

	d := deployment("spread", n)
	d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: d.Spec.Selector,
	}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, counts, err := waitRunning(ctx, cs, "default", "spread", n, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got := counts.perNode[f.name(i)]; got != 1 {
			t.Errorf("node %s runs %d of the pods, want 1 (per node: %v)", f.name(i), got, counts.perNode)
		}
	}

	victim := n - 1
	victimPods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + f.name(victim)})
	if err != nil || len(victimPods.Items) != 1 {
		t.Fatalf("the pods of %s: %v (err %v), want 1", f.name(victim), victimPods, err)
	}
	d0, err := killOne(ctx, cs, f, victim)
	if err != nil {
		t.Fatal(err)
	}
	// NotReady comes 20-30 s after the kill (a grace period of five
	// heartbeats, the last renewal 0-5 s before the kill; the controller
	// looks every 5 s): 10 s of slack for a loaded host.
	limit := nodeconfig.MonitorGracePeriod(testHeartbeat) + nodeMonitorPeriod + 10*time.Second
	t.Logf("killed node %s NotReady %.1f s after its kubelet died (limit %s)", f.name(victim), d0.Seconds(), limit)
	if d0 > limit {
		t.Errorf("killed node NotReady after %s, want within %s", d0, limit)
	}
	// The controller taints it in the same pass or the next one.
	var taints []corev1.Taint
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*nodeMonitorPeriod+5*time.Second, true, func(ctx context.Context) (bool, error) {
		node, err := cs.CoreV1().Nodes().Get(ctx, f.name(victim), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		taints = node.Spec.Taints
		return hasTaint(node, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute), nil
	})
	if err != nil {
		t.Errorf("killed node %s has no %s:NoExecute taint: %v", f.name(victim), corev1.TaintNodeUnreachable, taints)
	}
	// Its pod tolerates that taint for evictAfter seconds, then the taint
	// eviction controller deletes it (with the controller-manager's
	// defaults as upstream's flags set them: nodeLifecycleFlagDefaults).
	evictBy := evictAfter*time.Second + 2*nodeMonitorPeriod + 15*time.Second
	if err := waitEvicted(ctx, cs, victimPods.Items, evictBy); err != nil {
		t.Errorf("the pod of killed node %s: %v", f.name(victim), err)
	}
	m, err := readyNodes(ctx, cs, "hollow")
	if err != nil {
		t.Fatal(err)
	}
	for i := range victim {
		if m[f.name(i)] != corev1.ConditionTrue {
			t.Errorf("node %s is %q, want Ready: its kubelet is alive", f.name(i), m[f.name(i)])
		}
	}
}

func hasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}
