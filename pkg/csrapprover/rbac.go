package csrapprover

import (
	"context"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// ClusterRoleName is the role that lets an identity run the approver.
const ClusterRoleName = "edgeplane:kubelet-serving-approver"

var managedBy = map[string]string{"app.kubernetes.io/managed-by": "edgeplane"}

// ClusterRole is what the approver does and nothing more: watch kubelet
// serving requests, read Nodes' addresses, and set the approval of
// requests for the kubelet-serving signer.
func ClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName, Labels: managedBy},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"certificatesigningrequests/approval"}, Verbs: []string{"update"}},
			{APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"signers"}, ResourceNames: []string{certificatesv1.KubeletServingSignerName}, Verbs: []string{"approve"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		},
	}
}

// ClusterRoleBinding binds ClusterRole to the user the approver's client
// authenticates as.
func ClusterRoleBinding(userName string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName, Labels: managedBy},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: userName}},
	}
}

// EnsureRBAC creates ClusterRole and its binding to userName with client
// (an admin's), or updates them to what they should be. Transient API
// errors are retried for a few seconds.
func EnsureRBAC(ctx context.Context, client kubernetes.Interface, userName string) error {
	logger := klog.FromContext(ctx)
	roles := client.RbacV1().ClusterRoles()
	bindings := client.RbacV1().ClusterRoleBindings()
	role, binding := ClusterRole(), ClusterRoleBinding(userName)
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"ClusterRole " + role.Name, func(ctx context.Context) error {
			cur, err := roles.Get(ctx, role.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, err = roles.Create(ctx, role, metav1.CreateOptions{})
				return err
			}
			if err != nil {
				return err
			}
			cur.Rules, cur.Labels = role.Rules, role.Labels
			_, err = roles.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}},
		{"ClusterRoleBinding " + binding.Name, func(ctx context.Context) error {
			cur, err := bindings.Get(ctx, binding.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, err = bindings.Create(ctx, binding, metav1.CreateOptions{})
				return err
			}
			if err != nil {
				return err
			}
			if cur.RoleRef != binding.RoleRef {
				// The role of a binding cannot change: replace it.
				if err := bindings.Delete(ctx, cur.Name, metav1.DeleteOptions{}); err != nil {
					return err
				}
				_, err = bindings.Create(ctx, binding, metav1.CreateOptions{})
				return err
			}
			cur.Subjects, cur.Labels = binding.Subjects, binding.Labels
			_, err = bindings.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}},
	}
	for _, s := range steps {
		var lastErr error
		backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 6, Cap: 5 * time.Second}
		err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
			lastErr = s.do(ctx)
			switch {
			case lastErr == nil:
				return true, nil
			case apierrors.IsForbidden(lastErr), apierrors.IsUnauthorized(lastErr), apierrors.IsInvalid(lastErr):
				return false, lastErr
			}
			return false, nil
		})
		if err != nil {
			if lastErr != nil {
				err = lastErr
			}
			return fmt.Errorf("csrapprover: ensure %s: %w", s.what, err)
		}
		logger.V(1).Info("Ensured the approver's RBAC", "object", s.what, "user", userName)
	}
	return nil
}
