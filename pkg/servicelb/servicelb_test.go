package servicelb

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

func node(name string, ready bool, addrs ...corev1.NodeAddress) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
			Addresses:  addrs,
		},
	}
}

func internal(ip string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
}

func external(ip string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: ip}
}

func TestIngress(t *testing.T) {
	tests := []struct {
		name     string
		nodes    []*corev1.Node
		families []corev1.IPFamily
		want     string
	}{
		{name: "no nodes", want: ""},
		{name: "internal IPs sorted", nodes: []*corev1.Node{node("b", true, internal("192.168.1.20")), node("a", true, internal("192.168.1.3"))}, want: "192.168.1.3 192.168.1.20"},
		{name: "external IP wins", nodes: []*corev1.Node{node("a", true, internal("10.0.0.5"), external("203.0.113.7"))}, want: "203.0.113.7"},
		{name: "not ready left out", nodes: []*corev1.Node{node("a", true, internal("10.0.0.5")), node("b", false, internal("10.0.0.6"))}, want: "10.0.0.5"},
		{name: "no Ready condition left out", nodes: []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{internal("10.0.0.9")}}}}, want: ""},
		{name: "duplicates once", nodes: []*corev1.Node{node("a", true, internal("10.0.0.5")), node("b", true, internal("10.0.0.5"))}, want: "10.0.0.5"},
		{name: "dual stack, IPv4 first", nodes: []*corev1.Node{node("a", true, internal("fd00::5"), internal("10.0.0.5"))}, want: "10.0.0.5 fd00::5"},
		{name: "IPv6 Service gets IPv6 only", nodes: []*corev1.Node{node("a", true, internal("fd00::5"), internal("10.0.0.5"))}, families: []corev1.IPFamily{corev1.IPv6Protocol}, want: "fd00::5"},
		{name: "hostnames ignored", nodes: []*corev1.Node{node("a", true, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "a"}, internal("10.0.0.5"))}, want: "10.0.0.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(ingressIPs(Ingress(tt.nodes, tt.families)), " ")
			if got != tt.want {
				t.Errorf("Ingress = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestOurs(t *testing.T) {
	tests := []struct {
		name  string
		typ   corev1.ServiceType
		class *string
		want  bool
	}{
		{name: "LoadBalancer without class", typ: corev1.ServiceTypeLoadBalancer, want: true},
		{name: "LoadBalancer with our class", typ: corev1.ServiceTypeLoadBalancer, class: ptr.To(LoadBalancerClass), want: true},
		{name: "LoadBalancer with another class", typ: corev1.ServiceTypeLoadBalancer, class: ptr.To("metallb.io/metallb"), want: false},
		{name: "ClusterIP", typ: corev1.ServiceTypeClusterIP, want: false},
		{name: "NodePort", typ: corev1.ServiceTypeNodePort, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: tt.typ, LoadBalancerClass: tt.class}}
			if got := Ours(svc); got != tt.want {
				t.Errorf("Ours = %v, want %v", got, tt.want)
			}
		})
	}
}

func lbService(name string, class *string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: class,
			Selector:          map[string]string{"app": name},
			Ports:             []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

// putNode creates the node, or updates it, status included.
func putNode(t *testing.T, ctx context.Context, cs kubernetes.Interface, n *corev1.Node) {
	t.Helper()
	cur, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		if cur, err = cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cur.Status = n.Status
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitIngress(t *testing.T, ctx context.Context, cs kubernetes.Interface, svc, want string) {
	t.Helper()
	var got string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := cs.CoreV1().Services("default").Get(ctx, svc, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = strings.Join(ingressIPs(s.Status.LoadBalancer.Ingress), " ")
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("ingress of %s = %q, want %q: %v", svc, got, want, err)
	}
}

// TestController runs the controller against the real API server chain with
// Nodes and Services created through the API: the ingress follows nodes
// turning Ready and NotReady, joining and leaving, and Services of another
// class or type are left alone.
func TestController(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := "own informers"
		if shared {
			name = "the API server's informers"
		}
		t.Run(name, func(t *testing.T) { testController(t, shared) })
	}
}

// testController is TestController with its own informers, or with the API
// server's (Options.Informers, as the server runs it).
func testController(t *testing.T, shared bool) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	srv := testapiserver.Start(t, ctx)
	cs := srv.Client(t)
	o := Options{Kubeconfig: srv.Kubeconfig}
	if shared {
		o.Informers = srv.Chain.Informers()
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(stopCtx); err != nil {
			t.Error(err)
		}
		if err := c.Stop(stopCtx); err != nil { // twice is fine
			t.Error(err)
		}
		// The API server's informers outlive the controller.
		if shared && srv.Chain.Informers().Core().V1().Nodes().Informer().IsStopped() {
			t.Error("stopping the controller stopped the API server's Node informer")
		}
	})
	readyCtx, readyCancel := context.WithTimeout(ctx, 30*time.Second)
	defer readyCancel()
	if err := c.Ready(readyCtx); err != nil {
		t.Fatal(err)
	}

	putNode(t, ctx, cs, node("n1", true, internal("192.0.2.11")))
	putNode(t, ctx, cs, node("n2", true, internal("192.0.2.12"), external("198.51.100.12")))
	for _, svc := range []*corev1.Service{lbService("web", nil), lbService("ours", ptr.To(LoadBalancerClass)), lbService("theirs", ptr.To("example.com/other"))} {
		if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	steps := []struct {
		name string
		do   func(t *testing.T)
		want string
	}{
		{name: "two Ready nodes", do: func(*testing.T) {}, want: "192.0.2.11 198.51.100.12"},
		{name: "a node goes NotReady", do: func(t *testing.T) { putNode(t, ctx, cs, node("n1", false, internal("192.0.2.11"))) }, want: "198.51.100.12"},
		{name: "a node joins", do: func(t *testing.T) { putNode(t, ctx, cs, node("n3", true, internal("192.0.2.13"))) }, want: "192.0.2.13 198.51.100.12"},
		{name: "a node's address changes", do: func(t *testing.T) { putNode(t, ctx, cs, node("n3", true, internal("192.0.2.33"))) }, want: "192.0.2.33 198.51.100.12"},
		{name: "a node is deleted", do: func(t *testing.T) {
			if err := cs.CoreV1().Nodes().Delete(ctx, "n2", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, want: "192.0.2.33"},
		{name: "the NotReady node is back", do: func(t *testing.T) { putNode(t, ctx, cs, node("n1", true, internal("192.0.2.11"))) }, want: "192.0.2.11 192.0.2.33"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.do(t)
			waitIngress(t, ctx, cs, "web", st.want)
			waitIngress(t, ctx, cs, "ours", st.want)
		})
	}

	t.Run("another class is left alone", func(t *testing.T) {
		s, err := cs.CoreV1().Services("default").Get(ctx, "theirs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Status.LoadBalancer.Ingress) != 0 {
			t.Errorf("ingress of a Service of another class was set: %v", s.Status.LoadBalancer.Ingress)
		}
	})

	t.Run("no write when nothing changed", func(t *testing.T) {
		before, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A node update that changes neither readiness nor addresses, and a
		// label on the Service: both queue it, neither may write its status.
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels = map[string]string{"touched": "yes"}
		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		before.Labels = map[string]string{"touched": "yes"}
		labelled, err := cs.CoreV1().Services("default").Update(ctx, before, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A marker Service created after: once its ingress is set, the
		// worker has handled everything queued before it.
		if _, err := cs.CoreV1().Services("default").Create(ctx, lbService("marker", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitIngress(t, ctx, cs, "marker", "192.0.2.11 192.0.2.33")
		after, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != labelled.ResourceVersion {
			t.Errorf("web was written again: resourceVersion %s -> %s", labelled.ResourceVersion, after.ResourceVersion)
		}
	})

	t.Run("a Service turned LoadBalancer gets the ingress", func(t *testing.T) {
		svc := lbService("late", nil)
		svc.Spec.Type = corev1.ServiceTypeClusterIP
		created, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Spec.Type = corev1.ServiceTypeLoadBalancer
		if _, err := cs.CoreV1().Services("default").Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(fmt.Errorf("turning late into a LoadBalancer: %w", err))
		}
		waitIngress(t, ctx, cs, "late", "192.0.2.11 192.0.2.33")
	})
}
