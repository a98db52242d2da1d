package kubeproxy

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
)

// BindingName is the ClusterRoleBinding that lets nodes run kube-proxy.
const BindingName = "edgeplane:node-proxier"

// proxierRole is upstream's bootstrap ClusterRole for kube-proxy: read
// Services, EndpointSlices, Nodes and ServiceCIDRs, write Events.
const proxierRole = "system:node-proxier"

// EnsureRBAC binds system:node-proxier to the group system:nodes, so that
// each node's kube-proxy runs with the node's own credentials. Nodes can
// already read Services and Nodes; this adds EndpointSlices, ServiceCIDRs
// and kube-proxy's Events. An existing binding is left as the admin made it.
func EnsureRBAC(ctx context.Context, client kubernetes.Interface) error {
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: BindingName, Labels: map[string]string{"app.kubernetes.io/managed-by": "edgeplane"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: proxierRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: user.NodesGroup}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube-proxy: cluster role binding %s: %w", BindingName, err)
	}
	return nil
}
