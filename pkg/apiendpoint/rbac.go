package apiendpoint

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
)

// RBACName is the Role and RoleBinding (namespace default) that let nodes
// read the `kubernetes` EndpointSlice.
const RBACName = "edgeplane:node-api-endpoint"

// EnsureRBAC lets the group system:nodes get, list and watch the one
// EndpointSlice named kubernetes in the default namespace, and nothing
// else: upstream's system:node role reads no EndpointSlice and the Node
// authorizer has no opinion on them. An existing Role or binding is left
// as the admin made it.
func EnsureRBAC(ctx context.Context, client kubernetes.Interface) error {
	labels := map[string]string{"app.kubernetes.io/managed-by": "edgeplane"}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: RBACName, Namespace: sliceNamespace, Labels: labels},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"},
			ResourceNames: []string{sliceName}, Verbs: []string{"get", "list", "watch"},
		}},
	}
	if _, err := client.RbacV1().Roles(sliceNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("node API endpoint: role %s/%s: %w", sliceNamespace, RBACName, err)
	}
	b := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: RBACName, Namespace: sliceNamespace, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: RBACName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: user.NodesGroup}},
	}
	if _, err := client.RbacV1().RoleBindings(sliceNamespace).Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("node API endpoint: role binding %s/%s: %w", sliceNamespace, RBACName, err)
	}
	return nil
}
