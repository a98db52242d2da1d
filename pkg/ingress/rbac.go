package ingress

import (
	"context"
	"errors"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

// User is who the controller acts as; RoleName names its ClusterRole, its
// Role in ServiceNamespace and their bindings.
const (
	User     = "edgeplane:ingress"
	RoleName = "edgeplane:ingress"
)

// ClusterRules are what the controller reads everywhere, and the one thing
// it writes everywhere: the status of Ingresses, and Events on them.
// Secrets are read because an Ingress's TLS Secret may be in any namespace
// (its informer lists only type kubernetes.io/tls, but RBAC cannot narrow
// by type); they stay in the server's process, which holds the datastore
// anyway, and no node gets them.
func ClusterRules() []rbacv1.PolicyRule {
	read := []string{"get", "list", "watch"}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses", "ingressclasses"}, Verbs: read},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"services", "secrets"}, Verbs: read},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
	}
}

// NamespaceRules are what it writes in ServiceNamespace: its EndpointSlices.
func NamespaceRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"create", "update", "delete"}},
	}
}

// rbacManager owns the roles and bindings (server-side apply).
const rbacManager = "edgeplane"

// EnsureRBAC applies the ClusterRole, the Role and their bindings to User
// with client (an admin's); applying again is a no-op.
func EnsureRBAC(ctx context.Context, client kubernetes.Interface) error {
	labels := map[string]string{"app.kubernetes.io/managed-by": "edgeplane"}
	opts := metav1.ApplyOptions{FieldManager: rbacManager, Force: true}
	subject := rbacv1ac.Subject().WithAPIGroup(rbacv1.GroupName).WithKind(rbacv1.UserKind).WithName(User)
	cr := rbacv1ac.ClusterRole(RoleName).WithLabels(labels)
	for _, r := range ClusterRules() {
		cr.WithRules(rbacv1ac.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	if _, err := client.RbacV1().ClusterRoles().Apply(ctx, cr, opts); err != nil {
		return fmt.Errorf("ClusterRole %s: %w", RoleName, err)
	}
	crb := rbacv1ac.ClusterRoleBinding(RoleName).WithLabels(labels).WithSubjects(subject).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(RoleName))
	if _, err := client.RbacV1().ClusterRoleBindings().Apply(ctx, crb, opts); err != nil {
		return fmt.Errorf("ClusterRoleBinding %s: %w", RoleName, err)
	}
	role := rbacv1ac.Role(RoleName, ServiceNamespace).WithLabels(labels)
	for _, r := range NamespaceRules() {
		role.WithRules(rbacv1ac.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	if _, err := client.RbacV1().Roles(ServiceNamespace).Apply(ctx, role, opts); err != nil {
		return fmt.Errorf("Role %s/%s: %w", ServiceNamespace, RoleName, err)
	}
	rb := rbacv1ac.RoleBinding(RoleName, ServiceNamespace).WithLabels(labels).WithSubjects(subject).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(RoleName))
	if _, err := client.RbacV1().RoleBindings(ServiceNamespace).Apply(ctx, rb, opts); err != nil {
		return fmt.Errorf("RoleBinding %s/%s: %w", ServiceNamespace, RoleName, err)
	}
	return nil
}

// Client is the controller's client: the admin kubeconfig at path,
// impersonating User, so that it can do no more than its roles allow.
func Client(path string) (kubernetes.Interface, error) {
	cfg, err := kubeclient.Config(path, ComponentName, kubeclient.Steady)
	if err != nil {
		return nil, err
	}
	cfg.Impersonate.UserName = User
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ComponentName, err)
	}
	return client, nil
}

// Cleanup removes what the controller made, for --disable=ingress: the
// status it wrote on Ingresses, its EndpointSlices, its roles and
// bindings. The packaged manifest's objects (the IngressClass and the
// Service) go with the manifest. The Ingresses themselves stay. client is
// an admin's; Cleanup may be called again after an error.
func Cleanup(ctx context.Context, client kubernetes.Interface) error {
	var errs []error
	ings, err := client.NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, ing := range ings.Items {
		if len(ing.Status.LoadBalancer.Ingress) > 0 && statusWrittenByUs(&ing) {
			if err := ignoreNotFound(patchLB(ctx, client.NetworkingV1().Ingresses(ing.Namespace), ing.Name, nil)); err != nil {
				errs = append(errs, fmt.Errorf("clearing the status of Ingress %s/%s: %w", ing.Namespace, ing.Name, err))
			}
		}
	}
	if err := client.DiscoveryV1().EndpointSlices(ServiceNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: "endpointslice.kubernetes.io/managed-by=" + managedBy}); err != nil {
		errs = append(errs, fmt.Errorf("deleting the ingress EndpointSlices: %w", err))
	}
	errs = append(errs,
		ignoreNotFound(client.RbacV1().RoleBindings(ServiceNamespace).Delete(ctx, RoleName, metav1.DeleteOptions{})),
		ignoreNotFound(client.RbacV1().Roles(ServiceNamespace).Delete(ctx, RoleName, metav1.DeleteOptions{})),
		ignoreNotFound(client.RbacV1().ClusterRoleBindings().Delete(ctx, RoleName, metav1.DeleteOptions{})),
		ignoreNotFound(client.RbacV1().ClusterRoles().Delete(ctx, RoleName, metav1.DeleteOptions{})),
	)
	return errors.Join(errs...)
}
