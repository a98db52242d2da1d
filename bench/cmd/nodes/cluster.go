package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// workloadLabel marks the benchmark's pods.
const workloadLabel = "edgeplane.io/hollow-load"

// nodeReady is the node's Ready condition status ("" when it has none).
func nodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// readyNodes maps the named nodes that exist to their Ready status.
func readyNodes(ctx context.Context, cs kubernetes.Interface, prefix string) (map[string]corev1.ConditionStatus, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]corev1.ConditionStatus{}
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Name, prefix+"-") {
			out[list.Items[i].Name] = nodeReady(&list.Items[i])
		}
	}
	return out, nil
}

// waitNodesReady polls (every 2 s, at most timeout) until n nodes of the
// prefix are Ready. dead reports a hollow node whose process ended, which
// ends the wait with its log.
func waitNodesReady(ctx context.Context, cs kubernetes.Interface, prefix string, n int, timeout time.Duration, dead func() error) error {
	var last map[string]corev1.ConditionStatus
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if err := dead(); err != nil {
			return false, err
		}
		m, err := readyNodes(ctx, cs, prefix)
		if err != nil {
			return false, nil
		}
		last = m
		ready := 0
		for _, s := range m {
			if s == corev1.ConditionTrue {
				ready++
			}
		}
		return ready >= n, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d Ready nodes (seen: %v): %w", n, last, err)
	}
	return nil
}

// evictAfter is how long the workload's pods tolerate their node being
// unreachable or not ready. Upstream's default (the DefaultTolerationSeconds
// admission plugin) is 300 s: a killed node's pods would be evicted 300 s
// after it is NotReady whatever the control plane does. With 30 s the
// benchmark times the taint-based eviction itself in a short run.
const evictAfter = 30

// deployment is the benchmark's workload: replicas of one container that
// the hollow kubelets "run" on their fake runtime.
func deployment(name string, replicas int32) *appsv1.Deployment {
	var tolerations []corev1.Toleration
	for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
		tolerations = append(tolerations, corev1.Toleration{
			Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
			TolerationSeconds: ptr.To[int64](evictAfter),
		})
	}
	labels := map[string]string{workloadLabel: name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/hollow:1"}},
					// Only the hollow nodes: a server that is its own node
					// must not get them.
					NodeSelector:                  map[string]string{"edgeplane.io/hollow": "true"},
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					Tolerations:                   tolerations,
				},
			},
		},
	}
}

// podCounts counts the workload's pods by phase and nodes.
type podCounts struct {
	total, running int
	perNode        map[string]int
}

func countPods(ctx context.Context, cs kubernetes.Interface, ns, name string) (podCounts, error) {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: workloadLabel + "=" + name})
	if err != nil {
		return podCounts{}, err
	}
	c := podCounts{perNode: map[string]int{}}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		c.total++
		if p.Status.Phase == corev1.PodRunning {
			c.running++
			c.perNode[p.Spec.NodeName]++
		}
	}
	return c, nil
}

// waitRunning polls (every 2 s, at most timeout) until want pods of the
// workload run, and returns how long that took.
func waitRunning(ctx context.Context, cs kubernetes.Interface, ns, name string, want int, timeout time.Duration) (time.Duration, podCounts, error) {
	start := time.Now()
	var last podCounts
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		c, err := countPods(ctx, cs, ns, name)
		if err != nil {
			return false, nil
		}
		last = c
		return c.running >= want, nil
	})
	if err != nil {
		return 0, last, fmt.Errorf("%d of %d pods running after %s: %w", last.running, want, timeout, err)
	}
	return time.Since(start), last, nil
}

// churnOnce deletes k random pods of the workload (the Deployment makes new
// ones: k deletions and k creations) in at most k deletes. It returns the
// pods deleted and the requests that failed (the list, or a delete other
// than of a pod already gone).
func churnOnce(ctx context.Context, cs kubernetes.Interface, ns, name string, k int) (deleted, failed int) {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: workloadLabel + "=" + name})
	if err != nil {
		return 0, 1
	}
	items := list.Items
	rand.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	for _, p := range items {
		if deleted+failed >= k {
			break
		}
		if p.DeletionTimestamp != nil {
			continue
		}
		switch err := cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); {
		case err == nil:
			deleted++
		case !apierrors.IsNotFound(err):
			failed++
		}
	}
	return deleted, failed
}

// listAllPods does what `kubectl get pods -A` asks of the server: a list of
// pods in every namespace, in chunks of 500, and returns how long it took.
func listAllPods(ctx context.Context, cs kubernetes.Interface) (time.Duration, int, error) {
	start := time.Now()
	n := 0
	opts := metav1.ListOptions{Limit: 500}
	for range 1000 {
		list, err := cs.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return 0, 0, err
		}
		n += len(list.Items)
		if list.Continue == "" {
			return time.Since(start), n, nil
		}
		opts.Continue = list.Continue
	}
	return 0, n, fmt.Errorf("pod list did not end after 1000 chunks")
}

// percentile of sorted durations (p in 0..100) by nearest rank: the
// smallest sample that at least p% of the samples are at or below, so the
// p99 of fewer than 100 samples is their maximum; 0 when empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func sortDurations(d []time.Duration) []time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d
}
