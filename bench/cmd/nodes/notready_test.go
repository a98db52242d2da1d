package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// TestNotReadyWatch: against the real API server, a NotReady that the next
// status write clears at once is counted, each time; a node whose process
// ended and a node that is not the fleet's are not.
func TestNotReadyWatch(t *testing.T) {
	ctx := t.Context()
	cs := testapiserver.Start(t, ctx).Client(t)
	for _, name := range []string{"lite-0", "lite-1", "lite-2", "other-0"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		setReady(ctx, t, cs, name, corev1.ConditionTrue)
	}
	w, err := watchNotReady(ctx, cs, map[string]int{"lite-0": 0, "lite-1": 1, "lite-2": 2}, func(i int) bool { return i != 2 })
	if err != nil {
		t.Fatal(err)
	}
	if nodes, times := w.counts(); nodes != 0 || times != 0 {
		t.Fatalf("all Ready: %d nodes NotReady (%d times), want 0", nodes, times)
	}
	// lite-0 NotReady for a moment, twice; lite-2 (dead) and other-0 (not
	// the fleet's) NotReady; lite-1 NotReady last, so that once it is seen
	// the events before it have been seen too.
	for _, step := range []struct {
		name   string
		status corev1.ConditionStatus
	}{
		{"lite-0", corev1.ConditionFalse}, {"lite-0", corev1.ConditionTrue},
		{"lite-0", corev1.ConditionUnknown}, {"lite-0", corev1.ConditionTrue},
		{"lite-2", corev1.ConditionFalse}, {"other-0", corev1.ConditionFalse},
		{"lite-1", corev1.ConditionUnknown},
	} {
		setReady(ctx, t, cs, step.name, step.status)
	}
	var nodes, times int
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		nodes, times = w.counts()
		return times >= 3, nil
	})
	if err != nil || nodes != 2 || times != 3 {
		t.Errorf("%d nodes NotReady (%d times), want 2 (3 times: lite-0 twice, lite-1 once)", nodes, times)
	}
}

// setReady writes the node's Ready condition.
func setReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, s corev1.ConditionStatus) {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s, LastHeartbeatTime: now, LastTransitionTime: now}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
