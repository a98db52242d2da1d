package main

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// failedCreates are the FailedCreate events of a workload's ReplicaSets
// (event UID -> its count): the pod creations the ReplicaSet controller
// tried and the API server refused. The churn deletes pods and the
// controller creates their replacements, so a window's create errors are
// the counts' growth over it (since).
type failedCreates map[types.UID]int32

// readFailedCreates reads the FailedCreate events of the ReplicaSets of
// Deployment name in ns (named name-<hash>).
func readFailedCreates(ctx context.Context, cs kubernetes.Interface, ns, name string) (failedCreates, error) {
	list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.SelectorFromSet(fields.Set{
		"involvedObject.kind": "ReplicaSet", "reason": "FailedCreate",
	}).String()})
	if err != nil {
		return nil, err
	}
	out := failedCreates{}
	for _, e := range list.Items {
		if strings.HasPrefix(e.InvolvedObject.Name, name+"-") {
			out[e.UID] = eventCount(&e)
		}
	}
	return out, nil
}

// eventCount is the times an event happened: its count, or its series'
// (events.k8s.io writers), at least 1.
func eventCount(e *corev1.Event) int32 {
	n := e.Count
	if e.Series != nil {
		n = max(n, e.Series.Count)
	}
	return max(n, 1)
}

// since is how many times the events of after happened since before: an
// event that is new counts whole, one that expired in between not at all.
func (before failedCreates) since(after failedCreates) int {
	n := 0
	for uid, c := range after {
		n += int(max(c-before[uid], 0))
	}
	return n
}
