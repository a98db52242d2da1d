package controllers

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
	"github.com/edgeplane/edgeplane/pkg/certs"
)

// Timing of TestAutonomousNodes: nodes renew their Lease every
// testRenewInterval; the node lifecycle controller marks one that stopped
// after testGracePeriod (plus up to its 5 s monitor period); pods tolerate
// the partition taints for testToleration; "well past" it is testMargin more.
const (
	testRenewInterval = 500 * time.Millisecond
	testGracePeriod   = 6 * time.Second
	testToleration    = 3 // seconds
	testMargin        = 8 * time.Second
)

// TestAutonomousNodes runs the controller-manager as edgeplane runs it against
// the real API server chain, with nodes that the test makes with their own
// node credentials (the labels a kubelet's --node-labels would register) and
// whose Leases it renews, then stops renewing (a partition). No kubelet: the
// pods are bound by nodeName and marked Running by their node.
func TestAutonomousNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server")
	}
	_, ctx := ktesting.NewTestContext(t)
	srv := testapiserver.Start(t, ctx)
	admin := srv.Client(t)
	cfg, err := kubeclient.Config(srv.Kubeconfig, "test", kubeclient.Steady)
	if err != nil {
		t.Fatal(err)
	}
	nodeClient := func(t *testing.T, name string) kubernetes.Interface {
		t.Helper()
		dir := t.TempDir()
		kubeconfig := filepath.Join(dir, "kubelet.kubeconfig")
		if _, err := certs.EnsureNodeClient(ctx, srv.PKI, name, filepath.Join(dir, "pki"), kubeconfig, cfg.Host); err != nil {
			t.Fatal(err)
		}
		c, err := kubeclient.New(kubeconfig, "test-"+name, kubeclient.Burst)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// A kubelet may set the label on its own Node, at registration and
	// later (NodeRestriction restricts only kubernetes.io/ and k8s.io/
	// labels, and node-restriction.kubernetes.io/ ones); it may not set it
	// on another node (the Node authorizer).
	t.Run("a node labels itself", func(t *testing.T) {
		self := nodeClient(t, "edge-self")
		if _, err := self.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: "edge-self", Labels: map[string]string{AutonomousLabel: "true"},
		}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("register with %s=true: %v", AutonomousLabel, err)
		}
		other := nodeClient(t, "edge-other")
		if _, err := other.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-other"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name    string
			client  kubernetes.Interface
			node    string
			patch   string
			refused string // in the error; "" for allowed
		}{
			{"removes it from its own Node", self, "edge-self", `{"metadata":{"labels":{"edgeplane.io/autonomous":null}}}`, ""},
			{"sets it on its own Node", self, "edge-self", `{"metadata":{"labels":{"edgeplane.io/autonomous":"true"}}}`, ""},
			{"sets it on another Node", self, "edge-other", `{"metadata":{"labels":{"edgeplane.io/autonomous":"true"}}}`, "forbidden"},
			{"sets a node-restriction label on its own Node", self, "edge-self",
				`{"metadata":{"labels":{"node-restriction.kubernetes.io/autonomous":"true"}}}`, "is not allowed to modify labels"},
		} {
			_, err := tc.client.CoreV1().Nodes().Patch(ctx, tc.node, types.StrategicMergePatchType, []byte(tc.patch), metav1.PatchOptions{})
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("%s: %v, want allowed", tc.name, err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Errorf("%s: %v, want refused (%q)", tc.name, err, tc.refused)
			}
		}
		for _, n := range []string{"edge-self", "edge-other"} {
			if err := admin.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("a partition", func(t *testing.T) {
		_, serviceCIDR, _ := net.ParseCIDR(testapiserver.ServiceCIDR)
		cm, err := NewControllerManager(Options{PKI: srv.PKI, ServiceCIDR: serviceCIDR, NodeMonitorGracePeriod: testGracePeriod})
		if err != nil {
			t.Fatal(err)
		}
		if err := cm.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := cm.Stop(stopCtx); err != nil {
				t.Error(err)
			}
		})
		readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := cm.Ready(readyCtx); err != nil {
			t.Fatal(err)
		}

		// Each node in a zone of its own: the node lifecycle controller
		// taints at most one node per zone every 10 s (--node-eviction-rate
		// 0.1), and stops tainting when every zone has no Ready node; the
		// live node keeps its zone healthy.
		nodes := map[string]*testNode{}
		for _, n := range []struct {
			name       string
			autonomous bool
		}{
			{"edge-live", false},
			{"edge-plain", false},  // upstream: its pods are evicted
			{"edge-auto", true},    // kept through the partition and after
			{"edge-unlabel", true}, // the label removed while tainted: evicted then
			{"edge-label", false},  // the label added while tainted: kept
		} {
			nodes[n.name] = registerNode(t, ctx, nodeClient(t, n.name), n.name, n.autonomous)
		}

		pods := map[string]string{ // pod -> node
			"p-plain": "edge-plain", "p-auto": "edge-auto", "p-unlabel": "edge-unlabel", "p-label": "edge-label",
		}
		uids := map[string]types.UID{}
		for pod, node := range pods {
			tolerate := int64(testToleration)
			if pod == "p-label" {
				// Long enough for the test to label its node once tainted.
				tolerate = 3 * testToleration
			}
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: pod},
				Spec: corev1.PodSpec{NodeName: node, Tolerations: partitionTolerations(tolerate),
					Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause"}}},
			}
			created, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			uids[pod] = created.UID
			nodes[node].markRunning(t, ctx, pod)
		}
		deployment := autonomousDeployment(t, ctx, admin, "edge-auto")
		var deploymentPod corev1.Pod
		poll(t, ctx, "the Deployment's pod", func(ctx context.Context) (bool, error) {
			l, err := admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + deployment})
			if err != nil || len(l.Items) != 1 {
				return false, err
			}
			deploymentPod = l.Items[0]
			return true, nil
		})
		nodes["edge-auto"].markRunning(t, ctx, deploymentPod.Name)
		uids[deploymentPod.Name] = deploymentPod.UID

		for _, n := range []string{"edge-plain", "edge-auto", "edge-unlabel", "edge-label"} {
			nodes[n].alive.Store(false)
		}
		tainted := map[string]time.Time{}
		pollFor(t, ctx, "the partitioned nodes' unreachable:NoExecute taint", time.Minute, func(ctx context.Context) (bool, error) {
			for _, n := range []string{"edge-plain", "edge-auto", "edge-unlabel", "edge-label"} {
				if _, ok := tainted[n]; ok {
					continue
				}
				node, err := admin.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if at, ok := unreachableSince(node); ok {
					tainted[n] = at
					if n == "edge-label" {
						setLabel(t, ctx, admin, n, ptr.To("true"))
					}
				}
			}
			return len(tainted) == 4, nil
		})
		if live, err := admin.CoreV1().Nodes().Get(ctx, "edge-live", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		} else if _, ok := unreachableSince(live); ok {
			t.Fatal("the live node is tainted unreachable too")
		}

		// The plain node's pod: deleted once its toleration runs out.
		pollFor(t, ctx, "p-plain deleted by the taint-eviction controller", 30*time.Second, func(ctx context.Context) (bool, error) {
			p, err := admin.CoreV1().Pods("default").Get(ctx, "p-plain", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return err == nil && p.DeletionTimestamp != nil, err
		})

		// The autonomous nodes' pods (p-label's once labelled): untouched
		// until well past their toleration.
		kept := func(ctx context.Context, pods ...string) error {
			for _, name := range pods {
				p, err := admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
				switch {
				case apierrors.IsNotFound(err):
					return fmt.Errorf("pod %s deleted", name)
				case err != nil:
					return nil // retried at the next poll
				case p.UID != uids[name]:
					return fmt.Errorf("pod %s recreated (UID %s, was %s)", name, p.UID, uids[name])
				case p.DeletionTimestamp != nil:
					return fmt.Errorf("pod %s terminating: %s", name, disruption(p))
				}
			}
			return nil
		}
		autoPods := []string{"p-auto", deploymentPod.Name, "p-unlabel"}
		holdUntil(t, ctx, "autonomous nodes' pods kept", latestOf(tainted, "edge-auto", "edge-unlabel").Add(testToleration*time.Second+testMargin),
			func(ctx context.Context) error { return kept(ctx, autoPods...) })
		holdUntil(t, ctx, "the pod of the node labelled while tainted kept", tainted["edge-label"].Add(3*testToleration*time.Second+testMargin),
			func(ctx context.Context) error { return kept(ctx, "p-label") })
		// Their status is upstream's: not Ready, so out of Service endpoints.
		if p, err := admin.CoreV1().Pods("default").Get(ctx, "p-auto", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		} else if c := podCondition(p, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse {
			t.Errorf("p-auto on an unreachable node: Ready condition %+v, want False (set by the node lifecycle controller)", c)
		}
		if l, err := admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + deployment}); err != nil {
			t.Fatal(err)
		} else if len(l.Items) != 1 {
			t.Errorf("the Deployment has %d pods, want its one pod on edge-auto, not replaced", len(l.Items))
		}

		// The label removed while the node is tainted: the pod is evicted
		// as if the taint had just been added.
		removed := time.Now()
		setLabel(t, ctx, admin, "edge-unlabel", nil)
		pollFor(t, ctx, "p-unlabel deleted once its node is no longer autonomous", 30*time.Second, func(ctx context.Context) (bool, error) {
			p, err := admin.CoreV1().Pods("default").Get(ctx, "p-unlabel", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return err == nil && p.DeletionTimestamp != nil, err
		})
		if took := time.Since(removed); took < testToleration*time.Second-time.Second {
			t.Errorf("p-unlabel deleted %s after its node's label was removed, want after its %d s toleration", took, testToleration)
		}

		// The link returns: the taints go, the pods stay as they were.
		nodes["edge-auto"].resume(t, ctx)
		pollFor(t, ctx, "edge-auto's partition taints removed", time.Minute, func(ctx context.Context) (bool, error) {
			node, err := admin.CoreV1().Nodes().Get(ctx, "edge-auto", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, taint := range node.Spec.Taints {
				if partitionTaints[taint.Key] {
					return false, nil
				}
			}
			return true, nil
		})
		if err := kept(ctx, "p-auto", deploymentPod.Name, "p-label"); err != nil {
			t.Error(err)
		}
	})
}

// TestHidePartitionTaints: the taint-eviction controller's Node informer
// drops only the unreachable and not-ready NoExecute taints, and only of
// nodes labelled edgeplane.io/autonomous=true.
func TestHidePartitionTaints(t *testing.T) {
	taint := func(key string, effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: key, Effect: effect}
	}
	all := []corev1.Taint{
		taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute),
		taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule),
		taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute),
		taint(corev1.TaintNodeOutOfService, corev1.TaintEffectNoExecute),
		taint("example.com/maintenance", corev1.TaintEffectNoExecute),
	}
	kept := []corev1.Taint{all[1], all[3], all[4]}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   []corev1.Taint
	}{
		{"autonomous", map[string]string{AutonomousLabel: "true"}, kept},
		{"not labelled", nil, all},
		{"labelled false", map[string]string{AutonomousLabel: "false"}, all},
		{"labelled True", map[string]string{AutonomousLabel: "True"}, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tc.labels}, Spec: corev1.NodeSpec{Taints: slices.Clone(all)}}
			got, err := hidePartitionTaints(node)
			if err != nil {
				t.Fatal(err)
			}
			if taints := got.(*corev1.Node).Spec.Taints; !slices.Equal(taints, tc.want) || got.(*corev1.Node).Name != "n" {
				t.Errorf("node %q, taints %v; want n, taints %v", got.(*corev1.Node).Name, taints, tc.want)
			}
		})
	}
	// Anything else (a tombstone) passes through.
	tomb := cache.DeletedFinalStateUnknown{Key: "n"}
	if got, _ := hidePartitionTaints(tomb); got != tomb {
		t.Errorf("a tombstone became %v", got)
	}
}
