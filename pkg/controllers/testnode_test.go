package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

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

// latestOf is the latest of the nodes' times.
func latestOf(times map[string]time.Time, nodes ...string) time.Time {
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
