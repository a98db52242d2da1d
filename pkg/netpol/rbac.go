package netpol

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
)

// ClusterRoleName is the role, bound to every node, that lets a node's
// controller read what it enforces.
const ClusterRoleName = "edgeplane:network-policy"

// NodesGroup is the group of every node's client certificate.
const NodesGroup = "system:nodes"

// fieldManager owns the role and binding (server-side apply).
const fieldManager = "edgeplane"

// Rules are what the controller needs and nothing more: read-only access to
// NetworkPolicies, Pods and Namespaces in every namespace. A node needs the
// other nodes' pods too, since a policy's peers (their labels, addresses and
// named ports) live anywhere in the cluster; the Node authorizer lets a
// node list only its own pods, and binds no role that reads namespaces or
// policies. Granting reads (never writes, never Secrets) to all nodes gives
// each node what every per-node policy agent (kube-router, Calico's node
// agent, Cilium's agent) holds through its service account token on that
// node anyway.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "namespaces"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list", "watch"}},
	}
}

// EnsureRBAC applies the ClusterRole and its binding to group system:nodes
// with client (an admin's); applying again is a no-op.
func EnsureRBAC(ctx context.Context, client kubernetes.Interface) error {
	labels := map[string]string{"app.kubernetes.io/managed-by": "edgeplane"}
	role := rbacv1ac.ClusterRole(ClusterRoleName).WithLabels(labels)
	for _, r := range Rules() {
		role.WithRules(rbacv1ac.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if _, err := client.RbacV1().ClusterRoles().Apply(ctx, role, opts); err != nil {
		return fmt.Errorf("ClusterRole %s: %w", ClusterRoleName, err)
	}
	binding := rbacv1ac.ClusterRoleBinding(ClusterRoleName).WithLabels(labels).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(ClusterRoleName)).
		WithSubjects(rbacv1ac.Subject().WithAPIGroup(rbacv1.GroupName).WithKind(rbacv1.GroupKind).WithName(NodesGroup))
	if _, err := client.RbacV1().ClusterRoleBindings().Apply(ctx, binding, opts); err != nil {
		return fmt.Errorf("ClusterRoleBinding %s: %w", ClusterRoleName, err)
	}
	return nil
}
