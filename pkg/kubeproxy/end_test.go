package kubeproxy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// TestProxyThatFailsEnds: a kube-proxy that upstream refuses to run (here
// the host has no iptables: an empty PATH) ends the component: Done
// closes, Err and Ready say why, so that the node ends with it. It used to
// log "Services will not answer on this node" and leave the node Ready.
func TestProxyThatFailsEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the API server")
	}
	_, ctx := ktesting.NewTestContext(t)
	srv := testapiserver.Start(t, ctx)
	t.Setenv("PATH", t.TempDir())
	p, err := New(Config{Node: "n1", NodeIP: net.ParseIP("192.0.2.10"), ClusterCIDR: "10.42.0.0/16", Mode: ModeIPTables, Kubeconfig: srv.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatal("kube-proxy did not end within a minute of failing")
	}
	const want = "iptables is not available"
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Err = %v, want %q", err, want)
	}
	readyCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.Ready(readyCtx); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Ready = %v, want the end's error", err)
	}
}
