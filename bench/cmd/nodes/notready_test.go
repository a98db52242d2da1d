package main

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// TestNotReadyWatch: against the real API server, where the test flips
// Nodes' Ready conditions, every NotReady of a live fleet node is counted
// with its duration (a NotReady that the next status write clears at once,
// each time; one still open at the end counts to now); a node whose process
// ended and a node that is not the fleet's are not. The watch's clock is the
// test's, stepped between the writes, so that each duration is exact.
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
	clk := testingclock.NewFakeClock(time.Unix(1_800_000_000, 0))
	w, err := watchNotReadyClock(ctx, cs, map[string]int{"lite-0": 0, "lite-1": 1, "lite-2": 2}, func(i int) bool { return i != 2 }, clk)
	if err != nil {
		t.Fatal(err)
	}
	if c := w.counts(); c.nodes != 0 || c.episodes() != 0 {
		t.Fatalf("all Ready: %d nodes NotReady (%d times), want 0", c.nodes, c.episodes())
	}
	secs := func(s ...float64) []time.Duration {
		var out []time.Duration
		for _, v := range s {
			out = append(out, time.Duration(v*float64(time.Second)))
		}
		return out
	}
	// Each step writes the conditions of writes in order, waits until the
	// watch shows the figures of want (the last write of a step is one the
	// figures show, so that the ones before it were seen too), then steps
	// the clock by then.
	type write struct {
		name   string
		status corev1.ConditionStatus
	}
	for _, step := range []struct {
		name   string
		writes []write
		want   notReadyCounts
		then   time.Duration
	}{
		{"lite-0 not Ready", []write{{"lite-0", corev1.ConditionFalse}},
			notReadyCounts{nodes: 1, durations: secs(0), open: 1}, 3 * time.Second},
		{"lite-0 Ready after 3 s", []write{{"lite-0", corev1.ConditionTrue}},
			notReadyCounts{nodes: 1, durations: secs(3)}, time.Minute},
		{"lite-0 Unknown", []write{{"lite-0", corev1.ConditionUnknown}},
			notReadyCounts{nodes: 1, durations: secs(3, 0), open: 1}, 500 * time.Millisecond},
		{"lite-0 Ready after 0.5 s", []write{{"lite-0", corev1.ConditionTrue}},
			notReadyCounts{nodes: 1, durations: secs(3, 0.5)}, time.Second},
		{"dead and foreign nodes are not counted, lite-1 is", []write{
			{"lite-2", corev1.ConditionFalse}, {"other-0", corev1.ConditionFalse},
			{"lite-2", corev1.ConditionTrue}, {"other-0", corev1.ConditionTrue},
			{"lite-1", corev1.ConditionUnknown},
		}, notReadyCounts{nodes: 2, durations: secs(3, 0.5, 0), open: 1}, 10 * time.Second},
		{"lite-1 still not Ready counts to now", []write{{"lite-1", corev1.ConditionFalse}},
			notReadyCounts{nodes: 2, durations: secs(3, 0.5, 10), open: 1}, 0},
	} {
		for _, wr := range step.writes {
			setReady(ctx, t, cs, wr.name, wr.status)
		}
		var got notReadyCounts
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			got = w.counts()
			return got.nodes == step.want.nodes && got.open == step.want.open && slices.Equal(got.durations, step.want.durations), nil
		})
		if err != nil {
			t.Fatalf("%s: %d nodes, durations %v (%d open); want %d nodes, %v (%d open)",
				step.name, got.nodes, got.durations, got.open, step.want.nodes, step.want.durations, step.want.open)
		}
		clk.Step(step.then)
	}
	if c := w.counts(); c.episodes() != 3 || c.longest() != 10*time.Second || c.total() != 13500*time.Millisecond {
		t.Errorf("%d times, longest %s, total %s; want 3, 10s, 13.5s", c.episodes(), c.longest(), c.total())
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
