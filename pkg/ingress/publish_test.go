package ingress

import (
	"context"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// TestPublishBehindCache: the node's EndpointSlice exists in the API but
// not yet in the controller's cache (its own create a moment ago, before
// the informer delivered it). The next publish compares with the live
// slice and brings it to what it wants, with no error (an error is logged
// and retried: an error line at every start).
func TestPublishBehindCache(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srv := testapiserver.Start(t, ctx)
	cs := srv.Client(t)
	if err := EnsureRBAC(ctx, cs); err != nil {
		t.Fatal(err)
	}
	svc := create(t, cs.CoreV1().Services(ServiceNamespace).Create, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: ServiceName},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "https", Port: 443}}}})

	c, err := New(Options{Kubeconfig: srv.Kubeconfig, NodeName: "n1", NodeIPs: []net.IP{net.ParseIP("192.0.2.1")},
		HTTPAddress: "127.0.0.1:0", HTTPSAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	// The controller's client, and a factory that is never started: its
	// caches stay empty, as a cache that lags behind the API.
	if c.client, err = Client(srv.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	c.factory = informers.NewSharedInformerFactory(c.client, 0)
	name := sliceName("n1", false)
	earlier := wantSlice(svc, name, false, "n1", []string{"192.0.2.1"}, false, 80, 443)
	earlier = create(t, cs.DiscoveryV1().EndpointSlices(ServiceNamespace).Create, earlier)

	if err := c.publishEndpoints(ctx, svc, 80, 443); err != nil {
		t.Fatalf("publish with the slice in the API but not in the cache: %v", err)
	}
	got, err := cs.DiscoveryV1().EndpointSlices(ServiceNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := wantSlice(svc, name, false, "n1", []string{"192.0.2.1"}, true, 80, 443)
	if !sameSlice(got, want) {
		t.Fatalf("the live slice is %+v, want %+v (ready once both ports are bound)", got.Endpoints, want.Endpoints)
	}

	// The cache holds the slice as first created (not ready, an older
	// resourceVersion) while the API has the ready one: the update meets a
	// conflict, and the live slice is already as wanted.
	if err := c.factory.Discovery().V1().EndpointSlices().Informer().GetIndexer().Add(earlier); err != nil {
		t.Fatal(err)
	}
	if err := c.publishEndpoints(ctx, svc, 80, 443); err != nil {
		t.Fatalf("publish with a stale slice in the cache: %v", err)
	}
}
