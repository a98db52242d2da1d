package main

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	"k8s.io/utils/ptr"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// TestChurnCounts: against the real API server, churnOnce deletes the pods
// it was asked to and counts the requests the server refused: each delete
// of a user that may list pods but not delete them, the list of a user that
// may not list them.
func TestChurnCounts(t *testing.T) {
	ctx := t.Context()
	srv := testapiserver.Start(t, ctx)
	admin := srv.Client(t)
	const ns, name = "churn", "hollow-load"
	mustCreate(t, ctx, admin, ns)
	grant(t, ctx, admin, "lister", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}})
	grant(t, ctx, admin, "deleter", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "delete"}})
	for i := range 6 {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + string(rune('a'+i)), Labels: map[string]string{workloadLabel: name}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		user                string
		k                   int
		deleted, failed     int
		podsLeftAfterDelete int
	}{
		{user: "nobody", k: 2, deleted: 0, failed: 1, podsLeftAfterDelete: 6},  // the list is refused
		{user: "lister", k: 2, deleted: 0, failed: 2, podsLeftAfterDelete: 6},  // each delete is refused
		{user: "deleter", k: 2, deleted: 2, failed: 0, podsLeftAfterDelete: 4}, // the server deletes them at once (no kubelet)
		{user: "deleter", k: 9, deleted: 4, failed: 0, podsLeftAfterDelete: 0}, // fewer pods than asked: not an error
	} {
		deleted, failed := churnOnce(ctx, as(t, srv, tc.user), ns, name, tc.k)
		left, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if deleted != tc.deleted || failed != tc.failed || len(left.Items) != tc.podsLeftAfterDelete {
			t.Errorf("%s deletes %d: %d deleted, %d failed, %d pods left; want %d, %d, %d",
				tc.user, tc.k, deleted, failed, len(left.Items), tc.deleted, tc.failed, tc.podsLeftAfterDelete)
		}
	}
}

// TestFailedCreates: the real ReplicaSet controller, on a client that may
// not create pods, against the real API server: the FailedCreate events of
// the workload's ReplicaSet are counted, those of another ReplicaSet not.
func TestFailedCreates(t *testing.T) {
	ctx := t.Context()
	srv := testapiserver.Start(t, ctx)
	admin := srv.Client(t)
	const ns, name = "churn", "hollow-load"
	mustCreate(t, ctx, admin, ns)
	grant(t, ctx, admin, "rs-controller",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "delete", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "replicasets/status"}, Verbs: []string{"get", "list", "watch", "update"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}})
	before, err := readFailedCreates(ctx, admin, ns, name)
	if err != nil || len(before) != 0 {
		t.Fatalf("before: %v, %v; want no events", before, err)
	}
	for _, rs := range []string{name + "-5d4f8", "other-7c9b6"} {
		labels := map[string]string{"rs": rs}
		r := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: rs},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
				},
			},
		}
		if _, err := admin.AppsV1().ReplicaSets(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rsClient := as(t, srv, "rs-controller")
	inf := informers.NewSharedInformerFactoryWithOptions(rsClient, 0, informers.WithNamespace(ns))
	rsc := replicaset.NewReplicaSetController(ctx, inf.Apps().V1().ReplicaSets(), inf.Core().V1().Pods(), rsClient, 10)
	inf.Start(ctx.Done())
	go rsc.Run(ctx, 1)
	// Both ReplicaSets fail to create pods (and retry, with backoff) until
	// the test ends; wait for events of both, then check what was counted.
	var ours, others int
	var foreign []string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		after, err := readFailedCreates(ctx, admin, ns, name)
		if err != nil {
			return false, err
		}
		every, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		about := map[types.UID]string{}
		others, foreign = 0, nil
		for _, e := range every.Items {
			about[e.UID] = e.InvolvedObject.Name
			if e.Reason == "FailedCreate" && strings.HasPrefix(e.InvolvedObject.Name, "other-") {
				others++
			}
		}
		for uid := range after {
			if about[uid] != name+"-5d4f8" {
				foreign = append(foreign, about[uid])
			}
		}
		ours = before.since(after)
		return ours >= 2 && others >= 1, nil
	})
	if err != nil || len(foreign) > 0 {
		t.Fatalf("%d failed creates of %s counted (%d events of other-7c9b6; events of %v counted), want at least 2, at least 1, none: %v",
			ours, name, others, foreign, err)
	}
}

func TestFailedCreatesSince(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after failedCreates
		want          int
	}{
		{"none", failedCreates{}, failedCreates{}, 0},
		{"a new event counts whole", failedCreates{}, failedCreates{"a": 3}, 3},
		{"a grown one by its growth", failedCreates{"a": 3}, failedCreates{"a": 5}, 2},
		{"an expired one not at all", failedCreates{"a": 3, "b": 4}, failedCreates{"b": 5}, 1},
		{"nil before", nil, failedCreates{"a": 1}, 1},
	} {
		if got := tc.before.since(tc.after); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	// The count of an event of an events.k8s.io writer is its series'.
	e := &corev1.Event{Count: 0, Series: &corev1.EventSeries{Count: 4}}
	if got := eventCount(e); got != 4 {
		t.Errorf("series of 4: %d", got)
	}
	if got := eventCount(&corev1.Event{}); got != 1 {
		t.Errorf("an event without a count: %d, want 1", got)
	}
}

// mustCreate makes namespace ns with its default ServiceAccount (no
// controller-manager makes it here).
func mustCreate(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}, AutomountServiceAccountToken: ptr.To(false)}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// grant gives user the rules, cluster-wide.
func grant(t *testing.T, ctx context.Context, cs kubernetes.Interface, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-" + user}, Rules: rules}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// as is a client of the server's admin that acts as user.
func as(t *testing.T, srv *testapiserver.Server, user string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
