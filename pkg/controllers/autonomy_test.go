package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
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
		holdUntil(t, ctx, "autonomous nodes' pods kept", latest(tainted, "edge-auto", "edge-unlabel").Add(testToleration*time.Second+testMargin),
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

// testNode is a node made by the test: its Node, registered with its own
// credentials, and a Lease it renews while alive.
type testNode struct {
	name   string
	client kubernetes.Interface
	alive  atomic.Bool
}

// registerNode creates the Node as the node itself, in a zone of its own,
// labelled autonomous or not, posts it Ready and renews its Lease every
// testRenewInterval while alive, until the test ends.
func registerNode(t *testing.T, ctx context.Context, client kubernetes.Interface, name string, autonomous bool) *testNode {
	t.Helper()
	labels := map[string]string{corev1.LabelTopologyZone: name}
	if autonomous {
		labels[AutonomousLabel] = "true"
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node %s registers itself: %v", name, err)
	}
	n := &testNode{name: name, client: client}
	n.postReady(t, ctx)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To(int32(4)),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	if _, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.alive.Store(true)
	renewCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(renewCtx, testRenewInterval, false, func(ctx context.Context) (bool, error) {
			if !n.alive.Load() {
				return false, nil
			}
			l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, _ = client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
			return false, nil
		})
	}()
	return n
}

// postReady posts the node's status Ready, as its kubelet does: a patch of
// the status alone (an update would send the taints it read, which
// NodeRestriction refuses once the controllers changed them).
func (n *testNode) postReady(t *testing.T, ctx context.Context) {
	t.Helper()
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	patch, err := json.Marshal(map[string]any{"status": corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.CoreV1().Nodes().PatchStatus(ctx, n.name, patch); err != nil {
		t.Fatalf("node %s posts Ready: %v", n.name, err)
	}
}

// resume ends the node's partition: it renews its Lease again and posts its
// status, as a kubelet does when the link returns.
func (n *testNode) resume(t *testing.T, ctx context.Context) {
	t.Helper()
	n.alive.Store(true)
	n.postReady(t, ctx)
}

// markRunning posts the pod Running and Ready, as its node's kubelet does,
// once the Node authorizer has seen the pod bound to the node.
func (n *testNode) markRunning(t *testing.T, ctx context.Context, pod string) {
	t.Helper()
	pollFor(t, ctx, fmt.Sprintf("node %s may read its pod %s", n.name, pod), 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := n.client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		return err == nil, err
	})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := n.client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &now
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		_, err = n.client.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("node %s marks pod %s Running: %v", n.name, pod, err)
	}
}

// partitionTolerations tolerates the partition taints for seconds, as the
// DefaultTolerationSeconds admission would for 300.
func partitionTolerations(seconds int64) []corev1.Toleration {
	var ts []corev1.Toleration
	for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
		ts = append(ts, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(seconds)})
	}
	return ts
}

// autonomousDeployment creates a one-replica Deployment whose pod is bound
// to node, and returns its name (also its app label).
func autonomousDeployment(t *testing.T, ctx context.Context, client kubernetes.Interface, node string) string {
	t.Helper()
	name := "d-" + node
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeName: node, Tolerations: partitionTolerations(testToleration),
					Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause"}}},
			},
		},
	}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// setLabel sets (value non-nil) or removes the autonomous label of a node.
func setLabel(t *testing.T, ctx context.Context, client kubernetes.Interface, node string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, AutonomousLabel, v)
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// unreachableSince returns when the node was tainted unreachable:NoExecute.
func unreachableSince(node *corev1.Node) (time.Time, bool) {
	for _, taint := range node.Spec.Taints {
		if taint.Key == corev1.TaintNodeUnreachable && taint.Effect == corev1.TaintEffectNoExecute && taint.TimeAdded != nil {
			return taint.TimeAdded.Time, true
		}
	}
	return time.Time{}, false
}

// latest is the latest of the nodes' times.
func latest(times map[string]time.Time, nodes ...string) time.Time {
	var l time.Time
	for _, n := range nodes {
		if times[n].After(l) {
			l = times[n]
		}
	}
	return l
}

// disruption names the pod's DisruptionTarget condition, if any.
func disruption(p *corev1.Pod) string {
	if c := podCondition(p, corev1.DisruptionTarget); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "no DisruptionTarget condition"
}

// podCondition is the pod's condition of type t, or nil.
func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// pollFor is poll with its own bound.
func pollFor(t *testing.T, ctx context.Context, what string, bound time.Duration, cond wait.ConditionWithContextFunc) {
	t.Helper()
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, bound, true, func(ctx context.Context) (bool, error) {
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

// holdUntil checks check every 200 ms until the deadline and fails the test
// at its first error: what must stay true for that long.
func holdUntil(t *testing.T, ctx context.Context, what string, deadline time.Time, check func(context.Context) error) {
	t.Helper()
	holdCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var failed error
	_ = wait.PollUntilContextCancel(holdCtx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		failed = check(ctx)
		return failed != nil, nil
	})
	if failed != nil {
		t.Fatalf("%s: %v", what, failed)
	}
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
