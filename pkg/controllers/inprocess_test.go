package controllers

import (
	"context"
	"net"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// TestInProcess runs the controller-manager and scheduler against a real API
// server on SQLite in this process, twice in a row: the second round proves
// that a stopped component leaves nothing behind that keeps it from running
// again in the same process (configz, informer names, metrics), which the
// restart-after-failure and leader-election paths rely on.
func TestInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server")
	}
	logger, ctx := ktesting.NewTestContext(t)
	_ = logger
	srv := testapiserver.Start(t, ctx)
	pki := srv.PKI

	cfg, err := clientcmd.BuildConfigFromFlags("", pki.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	_, serviceCIDR, _ := net.ParseCIDR("10.43.0.0/16")
	opts := Options{PKI: pki, ServiceCIDR: serviceCIDR, Informers: srv.Chain.Informers()}

	for round := 1; round <= 2; round++ {
		cm, err := NewControllerManager(opts)
		if err != nil {
			t.Fatal(err)
		}
		sched, err := NewScheduler(opts)
		if err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		for _, c := range []interface {
			Start(context.Context) error
			Ready(context.Context) error
		}{cm, sched} {
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}
		readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := cm.Ready(readyCtx); err != nil {
			t.Fatalf("round %d: controller-manager: %v", round, err)
		}
		if err := sched.Ready(readyCtx); err != nil {
			t.Fatalf("round %d: scheduler: %v", round, err)
		}
		cancel()
		t.Logf("round %d: both ready after %s", round, time.Since(begin).Round(time.Millisecond))

		name := "web" + string(rune('0'+round))
		if round == 1 {
			createNode(t, ctx, client, "node-a")
		}
		createDeployment(t, ctx, client, name)
		poll(t, ctx, "2 pods bound to node-a", func(ctx context.Context) (bool, error) {
			pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
			if err != nil || len(pods.Items) != 2 {
				return false, err
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName != "node-a" {
					return false, nil
				}
			}
			return true, nil
		})

		checkConfigMapControllers(t, ctx, client, pki, round)

		begin = time.Now()
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := sched.Stop(stopCtx); err != nil {
			t.Errorf("round %d: stop scheduler: %v", round, err)
		}
		if err := cm.Stop(stopCtx); err != nil {
			t.Errorf("round %d: stop controller-manager: %v", round, err)
		}
		cancel()
		t.Logf("round %d: both stopped in %s", round, time.Since(begin).Round(time.Millisecond))
		if cm.Check(nil) == nil || sched.Check(nil) == nil {
			t.Errorf("round %d: healthy after stop", round)
		}
	}

	// Stopping while still starting up returns promptly too.
	for _, delay := range []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond} {
		cm, _ := NewControllerManager(opts)
		sched, _ := NewScheduler(opts)
		if err := cm.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sched.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay) // lands in different start-up steps
		begin := time.Now()
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := cm.Stop(stopCtx); err != nil {
			t.Errorf("stop controller-manager %s after start: %v", delay, err)
		}
		if err := sched.Stop(stopCtx); err != nil {
			t.Errorf("stop scheduler %s after start: %v", delay, err)
		}
		cancel()
		t.Logf("stopped %s after start in %s", delay, time.Since(begin).Round(time.Millisecond))
	}
}

func createNode(t *testing.T, ctx context.Context, client kubernetes.Interface, name string) {
	t.Helper()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	// The running controllers (node IPAM, lifecycle) write to a new Node
	// too, as they would before a kubelet's first status: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Capacity, node.Status.Allocatable = capacity, capacity
		node.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}}
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func createDeployment(t *testing.T, ctx context.Context, client kubernetes.Interface, name string) {
	t.Helper()
	replicas := int32(2)
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
			},
		},
	}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func poll(t *testing.T, ctx context.Context, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			lastErr = err
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last error: %v)", what, err, lastErr)
	}
}
