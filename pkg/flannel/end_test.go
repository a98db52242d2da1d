package flannel

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// TestNetworkThatCannotComeUpEnds: a flannel whose network cannot come up
// (here: no interface holds the node's address) ends: Done closes, Err and
// Ready say why, so that the node ends with it. It used to log the error
// and leave the node Ready with pods that reach no other node.
func TestNetworkThatCannotComeUpEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the API server")
	}
	_, ctx := ktesting.NewTestContext(t)
	srv := testapiserver.Start(t, ctx)
	client := srv.Client(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{PodCIDR: "10.42.7.0/24", PodCIDRs: []string{"10.42.7.0/24"}}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f, err := New(Config{
		Node: "n1", NodeIP: net.ParseIP("192.0.2.77"), ClusterCIDR: "10.42.0.0/16", Backend: BackendVXLAN,
		Kubeconfig: srv.Kubeconfig, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	select {
	case <-f.Done():
	case <-time.After(time.Minute):
		t.Fatal("flannel did not end within a minute of failing to come up")
	}
	const want = "no interface holds the node address"
	if err := f.Err(); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Err = %v, want %q", err, want)
	}
	readyCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := f.Ready(readyCtx); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Ready = %v, want the end's error", err)
	}
}
