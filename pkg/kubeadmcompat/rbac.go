package kubeadmcompat

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
)

// Names of kubeadm's RBAC objects (cmd/kubeadm/app/constants and phases).
const (
	ClusterInfoRole   = "kubeadm:bootstrap-signer-clusterinfo"
	KubeadmConfigRole = "kubeadm:nodes-kubeadm-config"
	KubeletConfigRole = "kubeadm:kubelet-config"
	GetNodesRole      = "kubeadm:get-nodes"
	// NodeTokenGroup is kubeadm's group of node bootstrap tokens
	// (nodetoken.NodeGroup).
	NodeTokenGroup = "system:bootstrappers:kubeadm:default-node-token"
)

// getConfigMap allows GET of one ConfigMap.
func getConfigMap(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{name},
	}}
}

func groups(names ...string) []rbacv1.Subject {
	out := make([]rbacv1.Subject, 0, len(names))
	for _, n := range names {
		out = append(out, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: n})
	}
	return out
}

// roles are the namespaced Roles and their RoleBindings (same name).
func roles() []rbacv1.Role {
	return []rbacv1.Role{
		{ObjectMeta: metav1.ObjectMeta{Name: ClusterInfoRole, Namespace: metav1.NamespacePublic}, Rules: getConfigMap(bootstrapapi.ConfigMapClusterInfo)},
		{ObjectMeta: metav1.ObjectMeta{Name: KubeadmConfigRole, Namespace: metav1.NamespaceSystem}, Rules: getConfigMap(KubeadmConfigName)},
		{ObjectMeta: metav1.ObjectMeta{Name: KubeletConfigRole, Namespace: metav1.NamespaceSystem}, Rules: getConfigMap(KubeletConfigName)},
	}
}

func roleBinding(r rbacv1.Role) rbacv1.RoleBinding {
	subjects := groups(NodeTokenGroup, user.NodesGroup)
	if r.Name == ClusterInfoRole {
		// Anonymous users: the one object a joining node reads before it
		// trusts the server.
		subjects = []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user.Anonymous}}
	}
	return rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: r.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name},
		Subjects:   subjects,
	}
}

// applyRBAC creates or corrects kubeadm's Roles, RoleBindings, and the
// kubeadm:get-nodes ClusterRole and ClusterRoleBinding. Rules, subjects and
// role references are set to kubeadm's, so that a widened rule is narrowed
// back on the next start.
func applyRBAC(ctx context.Context, client kubernetes.Interface) error {
	rbac := client.RbacV1()
	for _, r := range roles() {
		want, wantBinding := r, roleBinding(r)
		if err := apply("Role "+r.Namespace+"/"+r.Name,
			func() (*rbacv1.Role, error) { return rbac.Roles(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{}) },
			func() error { _, err := rbac.Roles(r.Namespace).Create(ctx, &want, metav1.CreateOptions{}); return err },
			func(cur *rbacv1.Role) error {
				if apiequality.Semantic.DeepEqual(cur.Rules, want.Rules) {
					return nil
				}
				cur.Rules = want.Rules
				_, err := rbac.Roles(r.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
				return err
			}); err != nil {
			return err
		}
		if err := apply("RoleBinding "+r.Namespace+"/"+r.Name,
			func() (*rbacv1.RoleBinding, error) {
				return rbac.RoleBindings(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			},
			func() error {
				_, err := rbac.RoleBindings(r.Namespace).Create(ctx, &wantBinding, metav1.CreateOptions{})
				return err
			},
			func(cur *rbacv1.RoleBinding) error {
				if apiequality.Semantic.DeepEqual(cur.Subjects, wantBinding.Subjects) && cur.RoleRef == wantBinding.RoleRef {
					return nil
				}
				if cur.RoleRef != wantBinding.RoleRef { // immutable: replace the binding
					if err := rbac.RoleBindings(r.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil {
						return err
					}
					_, err := rbac.RoleBindings(r.Namespace).Create(ctx, &wantBinding, metav1.CreateOptions{})
					return err
				}
				cur.Subjects = wantBinding.Subjects
				_, err := rbac.RoleBindings(r.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
				return err
			}); err != nil {
			return err
		}
	}

	cr := rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: GetNodesRole},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}}},
	}
	crb := rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: GetNodesRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: GetNodesRole},
		Subjects:   groups(NodeTokenGroup),
	}
	if err := apply("ClusterRole "+cr.Name,
		func() (*rbacv1.ClusterRole, error) { return rbac.ClusterRoles().Get(ctx, cr.Name, metav1.GetOptions{}) },
		func() error { _, err := rbac.ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{}); return err },
		func(cur *rbacv1.ClusterRole) error {
			if apiequality.Semantic.DeepEqual(cur.Rules, cr.Rules) {
				return nil
			}
			cur.Rules = cr.Rules
			_, err := rbac.ClusterRoles().Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}); err != nil {
		return err
	}
	return apply("ClusterRoleBinding "+crb.Name,
		func() (*rbacv1.ClusterRoleBinding, error) {
			return rbac.ClusterRoleBindings().Get(ctx, crb.Name, metav1.GetOptions{})
		},
		func() error {
			_, err := rbac.ClusterRoleBindings().Create(ctx, &crb, metav1.CreateOptions{})
			return err
		},
		func(cur *rbacv1.ClusterRoleBinding) error {
			if apiequality.Semantic.DeepEqual(cur.Subjects, crb.Subjects) && cur.RoleRef == crb.RoleRef {
				return nil
			}
			if cur.RoleRef != crb.RoleRef {
				if err := rbac.ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}); err != nil {
					return err
				}
				_, err := rbac.ClusterRoleBindings().Create(ctx, &crb, metav1.CreateOptions{})
				return err
			}
			cur.Subjects = crb.Subjects
			_, err := rbac.ClusterRoleBindings().Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
}

// apply gets an object, creates it when missing or corrects it with fix.
func apply[T any](what string, get func() (*T, error), create func() error, fix func(*T) error) error {
	cur, err := get()
	switch {
	case apierrors.IsNotFound(err):
		err = create()
		if apierrors.IsAlreadyExists(err) {
			err = nil // created by another server meanwhile
		}
	case err == nil:
		err = fix(cur)
	}
	if err != nil {
		return fmt.Errorf("kubeadmcompat: %s: %w", what, err)
	}
	return nil
}
