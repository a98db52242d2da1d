package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
)

// TestAddons runs the server's add-ons in the binary, as a control plane
// (no kubelet): the packaged CoreDNS manifest is written and applied with
// kube-dns at the tenth address of the service CIDR, a user manifest
// dropped into <data-dir>/manifests is applied, a LoadBalancer Service gets
// a Ready Node's address; after a restart with --disable=coredns,servicelb
// the file and its objects are gone and new LoadBalancer Services get no
// ingress.
func TestAddons(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	parallel(t, 70*time.Second)
	dataDir := t.TempDir()
	s := startServer(t, dataDir, "--service-cidr", "10.44.0.0/16")
	ctx := context.Background()

	eventually(t, time.Minute, "kube-dns at 10.44.0.10", func(ctx context.Context) (bool, error) {
		svc, err := s.client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return svc.Spec.ClusterIP == "10.44.0.10", fmt.Errorf("ClusterIP %s", svc.Spec.ClusterIP)
	})
	corednsFile := filepath.Join(dataDir, "manifests", "coredns.yaml")
	if _, err := os.Stat(corednsFile); err != nil {
		t.Fatalf("packaged manifest: %v", err)
	}

	// A user manifest; the server checks the directory every 30 s.
	user := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dropped-in\n  namespace: default\ndata:\n  k: v\n"
	writeConfig(t, filepath.Join(dataDir, "manifests", "user.yaml"), user)
	eventually(t, 2*time.Minute, "the user's ConfigMap", func(ctx context.Context) (bool, error) {
		_, err := s.client.CoreV1().ConfigMaps("default").Get(ctx, "dropped-in", metav1.GetOptions{})
		return err == nil, err
	})

	// A Ready Node (no kubelet: its status written through the API).
	node, err := s.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lb-node"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The controller-manager updates the new Node too (its pod CIDR).
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := s.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status = corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Test", LastHeartbeatTime: metav1.Now()}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.77"}},
		}
		_, err = s.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	createLB := func(name string) {
		t.Helper()
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}
		if _, err := s.client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createLB("web")
	eventually(t, time.Minute, "web's ingress", func(ctx context.Context) (bool, error) {
		svc, err := s.client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		in := svc.Status.LoadBalancer.Ingress
		return len(in) == 1 && in[0].IP == "192.0.2.77", fmt.Errorf("ingress %v", in)
	})

	s.stop()
	s = startServer(t, dataDir, "--service-cidr", "10.44.0.0/16", "--disable=coredns,servicelb")
	eventually(t, time.Minute, "the CoreDNS objects deleted", func(ctx context.Context) (bool, error) {
		_, err := s.client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("kube-dns: %v", err)
		}
		_, err = s.client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Errorf("coredns Deployment: %v", err)
	})
	if _, err := os.Stat(corednsFile); !os.IsNotExist(err) {
		t.Errorf("coredns.yaml still there with --disable=coredns (%v)", err)
	}
	if _, err := s.client.CoreV1().ConfigMaps("default").Get(ctx, "dropped-in", metav1.GetOptions{}); err != nil {
		t.Errorf("the user's manifest is no longer applied: %v", err)
	}
	createLB("late")
	// servicelb is off: a marker user manifest applied after the Service
	// was created shows the server has been up a while; the Service still
	// has no ingress.
	writeConfig(t, filepath.Join(dataDir, "manifests", "marker.yaml"), strings.ReplaceAll(user, "dropped-in", "marker"))
	eventually(t, 2*time.Minute, "the marker ConfigMap", func(ctx context.Context) (bool, error) {
		_, err := s.client.CoreV1().ConfigMaps("default").Get(ctx, "marker", metav1.GetOptions{})
		return err == nil, err
	})
	late, err := s.client.CoreV1().Services("default").Get(ctx, "late", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(late.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("with --disable=servicelb, late got ingress %v", late.Status.LoadBalancer.Ingress)
	}
}
