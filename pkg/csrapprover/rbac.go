package csrapprover

import (
	"context"
	"fmt"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
)

// ClusterRoleName is the role that lets an identity run the approver;
// RecordsRoleName (a Role in nodeidentity.Namespace, of the same name) lets
// it read and make node identity records.
const (
	ClusterRoleName = "edgeplane:kubelet-serving-approver"
	RecordsRoleName = ClusterRoleName
)

var managedBy = map[string]string{"app.kubernetes.io/managed-by": "edgeplane"}

// ClusterRole is what the approver does and nothing more: watch the
// requests of the two signers it decides, read Nodes and the kubernetes
// Service's EndpointSlices (their addresses), and set the approval of
// requests for those two signers.
func ClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName, Labels: managedBy},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"certificatesigningrequests/approval"}, Verbs: []string{"update"}},
			{APIGroups: []string{certificatesv1.GroupName}, Resources: []string{"signers"},
				ResourceNames: []string{certificatesv1.KubeletServingSignerName, certificatesv1.KubeAPIServerClientKubeletSignerName}, Verbs: []string{"approve"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{discoveryv1.GroupName}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
}

// RecordsRole lets the approver read node identity records and make new
// ones; it cannot change or delete one (`edgeplane node forget` is an
// admin's).
func RecordsRole() *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: RecordsRoleName, Namespace: nodeidentity.Namespace, Labels: managedBy},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create"}},
		},
	}
}

func subjects(userName string) []rbacv1.Subject {
	return []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: userName}}
}

// ClusterRoleBinding binds ClusterRole to the user the approver's client
// authenticates as.
func ClusterRoleBinding(userName string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName, Labels: managedBy},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleName},
		Subjects:   subjects(userName),
	}
}

// RecordsRoleBinding binds RecordsRole to that user.
func RecordsRoleBinding(userName string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: RecordsRoleName, Namespace: nodeidentity.Namespace, Labels: managedBy},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: RecordsRoleName},
		Subjects:   subjects(userName),
	}
}

// EnsureRBAC creates ClusterRole, RecordsRole and their bindings to
// userName with client (an admin's), or updates them to what they should
// be. Transient API errors are retried for a few seconds.
func EnsureRBAC(ctx context.Context, client kubernetes.Interface, userName string) error {
	logger := klog.FromContext(ctx)
	rbac := client.RbacV1()
	role, binding := ClusterRole(), ClusterRoleBinding(userName)
	records, recordsBinding := RecordsRole(), RecordsRoleBinding(userName)
	ns := records.Namespace
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"ClusterRole " + role.Name, func(ctx context.Context) error {
			return ensureObject(ctx, rbac.ClusterRoles().Get, rbac.ClusterRoles().Create, rbac.ClusterRoles().Update, nil, role,
				nil, func(cur *rbacv1.ClusterRole) bool {
					return anyOf(set(&cur.Rules, role.Rules), set(&cur.Labels, role.Labels))
				})
		}},
		{"ClusterRoleBinding " + binding.Name, func(ctx context.Context) error {
			return ensureObject(ctx, rbac.ClusterRoleBindings().Get, rbac.ClusterRoleBindings().Create, rbac.ClusterRoleBindings().Update, rbac.ClusterRoleBindings().Delete, binding,
				func(cur *rbacv1.ClusterRoleBinding) bool { return cur.RoleRef != binding.RoleRef },
				func(cur *rbacv1.ClusterRoleBinding) bool {
					return anyOf(set(&cur.Subjects, binding.Subjects), set(&cur.Labels, binding.Labels))
				})
		}},
		{"Role " + ns + "/" + records.Name, func(ctx context.Context) error {
			return ensureObject(ctx, rbac.Roles(ns).Get, rbac.Roles(ns).Create, rbac.Roles(ns).Update, nil, records,
				nil, func(cur *rbacv1.Role) bool {
					return anyOf(set(&cur.Rules, records.Rules), set(&cur.Labels, records.Labels))
				})
		}},
		{"RoleBinding " + ns + "/" + recordsBinding.Name, func(ctx context.Context) error {
			return ensureObject(ctx, rbac.RoleBindings(ns).Get, rbac.RoleBindings(ns).Create, rbac.RoleBindings(ns).Update, rbac.RoleBindings(ns).Delete, recordsBinding,
				func(cur *rbacv1.RoleBinding) bool { return cur.RoleRef != recordsBinding.RoleRef },
				func(cur *rbacv1.RoleBinding) bool {
					return anyOf(set(&cur.Subjects, recordsBinding.Subjects), set(&cur.Labels, recordsBinding.Labels))
				})
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

type (
	getFunc[T any]    func(context.Context, string, metav1.GetOptions) (T, error)
	createFunc[T any] func(context.Context, T, metav1.CreateOptions) (T, error)
	updateFunc[T any] func(context.Context, T, metav1.UpdateOptions) (T, error)
	deleteFunc        func(context.Context, string, metav1.DeleteOptions) error
)

// set assigns want to *cur and reports whether that changed it.
func set[T any](cur *T, want T) bool {
	changed := !equality.Semantic.DeepEqual(*cur, want)
	*cur = want
	return changed
}

// anyOf reports whether any of changed is true (every set is done
// first, as arguments are).
func anyOf(changed ...bool) bool { return slices.Contains(changed, true) }

// named is an RBAC object (a pointer) with a name.
type named interface{ GetName() string }

// ensureObject creates want, or sets what fix sets on the current object
// and updates it when fix says that changed it.
// When replace (nil for roles) says the current object cannot become want
// by an update (a binding's role cannot change), it is deleted with del and
// want created instead.
func ensureObject[T named](ctx context.Context, get getFunc[T], create createFunc[T], update updateFunc[T], del deleteFunc, want T, replace func(T) bool, fix func(T) bool) error {
	cur, err := get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if replace != nil && replace(cur) {
		if err := del(ctx, want.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		_, err = create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if !fix(cur) {
		return nil
	}
	_, err = update(ctx, cur, metav1.UpdateOptions{})
	return err
}
