package controllers

import (
	"context"
	"fmt"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/klog/v2"
)

// ClusterRoles that upstream bootstraps and the CSR approver checks.
const (
	nodeBootstrapperRole = "system:node-bootstrapper"
	nodeClientRole       = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
	selfNodeClientRole   = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"
)

// RetiredAutoApproveBinding granted upstream's nodeclient auto-approval to
// every bootstrap token: the csrapproving controller then signed a client
// certificate for whatever node name a node token asked, the server's own
// node included. Node token requests are edgeplane's CSR approver's to
// decide (pkg/csrapprover), and EnsureNodeBootstrapRBAC deletes this
// binding where an earlier version made it.
const RetiredAutoApproveBinding = "edgeplane:node-autoapprove-bootstrap"

// NodeBootstrapBindings are the ClusterRoleBindings that let a kubelet join
// with a bootstrap token: any bootstrap token may create a CSR (which
// edgeplane's CSR approver decides, binding the node name to the key of its
// first request), and nodes may renew their own client certificates
// (upstream's csrapproving controller approves those).
func NodeBootstrapBindings() []*rbacv1.ClusterRoleBinding {
	return []*rbacv1.ClusterRoleBinding{
		groupBinding("edgeplane:kubelet-bootstrap", nodeBootstrapperRole, bootstrapapi.BootstrapDefaultGroup),
		groupBinding("edgeplane:node-autoapprove-certificate-rotation", selfNodeClientRole, user.NodesGroup),
	}
}

func groupBinding(name, role, group string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "edgeplane"},
		},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: group}},
	}
}

// EnsureNodeBootstrapRBAC deletes RetiredAutoApproveBinding and creates the
// NodeBootstrapBindings that are missing. Existing bindings of those names
// are left as they are, so an operator who changed or emptied one (to turn
// automatic approval off) keeps that choice; deleting one brings it back on
// the next start. Transient API errors are retried for a few seconds.
func EnsureNodeBootstrapRBAC(ctx context.Context, client kubernetes.Interface) error {
	logger := klog.FromContext(ctx)
	if err := deleteRetired(ctx, client); err != nil {
		return err
	}
	for _, b := range NodeBootstrapBindings() {
		var lastErr error
		backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 6, Cap: 5 * time.Second}
		err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
			_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{})
			switch {
			case err == nil:
				logger.V(1).Info("Created ClusterRoleBinding", "name", b.Name, "role", b.RoleRef.Name)
				return true, nil
			case apierrors.IsAlreadyExists(err):
				return true, nil
			case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), apierrors.IsInvalid(err):
				return false, err
			default:
				lastErr = err
				return false, nil
			}
		})
		if err != nil {
			if lastErr != nil {
				err = lastErr
			}
			return fmt.Errorf("create ClusterRoleBinding %s: %w", b.Name, err)
		}
	}
	return nil
}

// deleteRetired deletes RetiredAutoApproveBinding, retrying transient
// errors: while it exists, any node token gets a client certificate for
// any node name.
func deleteRetired(ctx context.Context, client kubernetes.Interface) error {
	var lastErr error
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 6, Cap: 5 * time.Second}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		err := client.RbacV1().ClusterRoleBindings().Delete(ctx, RetiredAutoApproveBinding, metav1.DeleteOptions{})
		switch {
		case err == nil:
			klog.FromContext(ctx).Info("Deleted the retired ClusterRoleBinding that let upstream approve any node token's client certificate", "name", RetiredAutoApproveBinding)
			return true, nil
		case apierrors.IsNotFound(err):
			return true, nil
		case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
			return false, err
		default:
			lastErr = err
			return false, nil
		}
	})
	if err != nil {
		if lastErr != nil {
			err = lastErr
		}
		return fmt.Errorf("delete ClusterRoleBinding %s: %w", RetiredAutoApproveBinding, err)
	}
	return nil
}
