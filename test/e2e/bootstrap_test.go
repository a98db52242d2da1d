package e2e

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	schedulingapiv1 "k8s.io/kubernetes/pkg/apis/scheduling/v1"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

// testBootstrapPolicy checks what edgeplane's bootstrap hooks (pkg/chain,
// bootstraphooks.go, in place of upstream's) leave behind: every upstream
// bootstrap role and binding exists and a dry-run reconcile finds nothing
// to add, and every system priority class exists with its value.
func testBootstrapPolicy(t *testing.T, s *server) {
	ctx := context.Background()
	// ~270 reads: without client-side throttling.
	cfg := rest.CopyConfig(s.config)
	cfg.QPS, cfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rbac := client.RbacV1()
	check := func(kind, namespace, name string, run func() (reconciliation.ReconcileOperation, error)) {
		t.Helper()
		op, err := run()
		if err != nil || op != reconciliation.ReconcileNone {
			t.Errorf("%s %s/%s: reconcile would %q (%v)", kind, namespace, name, op, err)
		}
	}
	for _, r := range append(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()...) {
		opts := reconciliation.ReconcileRoleOptions{
			Role:   reconciliation.ClusterRoleRuleOwner{ClusterRole: &r},
			Client: reconciliation.ClusterRoleModifier{Client: rbac.ClusterRoles()},
		}
		check("ClusterRole", "", r.Name, func() (reconciliation.ReconcileOperation, error) {
			res, err := opts.Run()
			return res.Operation, err
		})
	}
	for _, b := range append(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()...) {
		opts := reconciliation.ReconcileRoleBindingOptions{
			RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: &b},
			Client:      reconciliation.ClusterRoleBindingClientAdapter{Client: rbac.ClusterRoleBindings()},
		}
		check("ClusterRoleBinding", "", b.Name, func() (reconciliation.ReconcileOperation, error) {
			res, err := opts.Run()
			return res.Operation, err
		})
	}
	for ns, roles := range bootstrappolicy.NamespaceRoles() {
		for _, r := range roles {
			opts := reconciliation.ReconcileRoleOptions{
				Role:   reconciliation.RoleRuleOwner{Role: &r},
				Client: reconciliation.RoleModifier{Client: rbac, NamespaceClient: client.CoreV1().Namespaces()},
			}
			check("Role", ns, r.Name, func() (reconciliation.ReconcileOperation, error) {
				res, err := opts.Run()
				return res.Operation, err
			})
		}
	}
	for ns, bindings := range bootstrappolicy.NamespaceRoleBindings() {
		for _, b := range bindings {
			opts := reconciliation.ReconcileRoleBindingOptions{
				RoleBinding: reconciliation.RoleBindingAdapter{RoleBinding: &b},
				Client:      reconciliation.RoleBindingClientAdapter{Client: rbac, NamespaceClient: client.CoreV1().Namespaces()},
			}
			check("RoleBinding", ns, b.Name, func() (reconciliation.ReconcileOperation, error) {
				res, err := opts.Run()
				return res.Operation, err
			})
		}
	}
	for _, want := range schedulingapiv1.SystemPriorityClasses() {
		got, err := client.SchedulingV1().PriorityClasses().Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil || got.Value != want.Value {
			t.Errorf("PriorityClass %s: %v (value %v), want value %d", want.Name, err, got.Value, want.Value)
		}
	}
}
