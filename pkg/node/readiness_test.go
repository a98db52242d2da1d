package node

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// fakePart is a part whose Ready returns at once, or waits for ctx.
type fakePart struct {
	name  string
	ready bool
}

func (p fakePart) Name() string                { return p.name }
func (p fakePart) Start(context.Context) error { return nil }
func (p fakePart) Stop(context.Context) error  { return nil }
func (p fakePart) Ready(ctx context.Context) error {
	if p.ready {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestLocalReady: a node that started offline is running once the parts
// up to its kubelet are ready, whatever the parts that need the API do.
func TestLocalReady(t *testing.T) {
	endpoint, images := fakePart{PartAPIEndpoint, true}, fakePart{"images", true}
	for _, tc := range []struct {
		name  string
		parts []component.Component
		ok    bool
	}{
		{"kubelet runs, the pod network waits for the API", []component.Component{endpoint, images, fakePart{PartKubelet, true}, fakePart{PartFlannel, false}}, true},
		{"kubelet not running", []component.Component{endpoint, images, fakePart{PartKubelet, false}, fakePart{PartFlannel, true}}, false},
		{"not started", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			n := &Node{parts: tc.parts}
			if err := n.LocalReady(ctx); (err == nil) != tc.ok {
				t.Errorf("LocalReady: %v, want ready %v", err, tc.ok)
			}
		})
	}
}

// TestWaitNodeReadyThroughTheEndpoint: an agent's node reads its Ready
// condition as its parts reach the API, through the node-local endpoint,
// not from --server alone: with --server gone and another server
// answering, the node is Ready (and the agent tells systemd so).
func TestWaitNodeReadyThroughTheEndpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the API server")
	}
	_, ctx := ktesting.NewTestContext(t)
	srv := testapiserver.Start(t, ctx)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-a"}}
	created, err := srv.Client(t).CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := srv.Client(t).CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// --server is gone; the endpoint's kubeconfig reaches a live server
	// (here the live server itself stands for the endpoint).
	p := PathsIn(t.TempDir())
	if err := os.WriteFile(p.Kubeconfig, []byte(kubeconfigTo(closedServerURL(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.LocalKubeconfig, mustRead(t, srv.Kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		inServer bool // no endpoint: the node's own kubeconfig
		ready    bool
	}{
		{"agent, through the endpoint", false, true},
		{"no endpoint, --server gone", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			n := &Node{cfg: Config{Settings: Settings{Name: "edge-a"}, InServer: tc.inServer}, paths: p}
			if err := n.waitNodeReady(ctx); (err == nil) != tc.ready {
				t.Errorf("waitNodeReady: %v, want Ready %v", err, tc.ready)
			}
		})
	}
}

// kubeconfigTo is a kubeconfig for server with no credentials.
func kubeconfigTo(server string) string {
	return "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + server +
		"\n    insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user: {}\ncurrent-context: c\n"
}
