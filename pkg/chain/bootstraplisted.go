package chain

import (
	"context"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
)

// listedRBAC is what four LISTs found of the RBAC objects, for the
// bootstrap reconcile's reads. Upstream's reconcile reads each of its ~140
// objects with its own GET, one after the other through the loopback
// client's rate limiter: 0.6-0.7 s of a warm restart's /readyz went there
// (docs/PERFORMANCE.md, "Start-up"). An object is answered from the lists
// once; a second read of it (the retry after a conflict) goes to the API
// server, so a stale listing costs one conflict, never a lost update.
type listedRBAC struct {
	objs  map[listedKey]runtime.Object
	mu    sync.Mutex // the reconcile's workers take from it at once
	taken map[listedKey]bool
}

type listedKey struct{ kind, namespace, name string }

func listRBAC(ctx context.Context, client kubernetes.Interface) (*listedRBAC, error) {
	l := &listedRBAC{objs: map[listedKey]runtime.Object{}, taken: map[listedKey]bool{}}
	rbac, all := client.RbacV1(), metav1.ListOptions{}
	crs, err := rbac.ClusterRoles().List(ctx, all)
	if err != nil {
		return nil, err
	}
	for i := range crs.Items {
		l.add("ClusterRole", &crs.Items[i], &crs.Items[i].ObjectMeta)
	}
	crbs, err := rbac.ClusterRoleBindings().List(ctx, all)
	if err != nil {
		return nil, err
	}
	for i := range crbs.Items {
		l.add("ClusterRoleBinding", &crbs.Items[i], &crbs.Items[i].ObjectMeta)
	}
	roles, err := rbac.Roles(metav1.NamespaceAll).List(ctx, all)
	if err != nil {
		return nil, err
	}
	for i := range roles.Items {
		l.add("Role", &roles.Items[i], &roles.Items[i].ObjectMeta)
	}
	rbs, err := rbac.RoleBindings(metav1.NamespaceAll).List(ctx, all)
	if err != nil {
		return nil, err
	}
	for i := range rbs.Items {
		l.add("RoleBinding", &rbs.Items[i], &rbs.Items[i].ObjectMeta)
	}
	return l, nil
}

func (l *listedRBAC) add(kind string, obj runtime.Object, meta *metav1.ObjectMeta) {
	l.objs[listedKey{kind, meta.Namespace, meta.Name}] = obj
}

// take answers a read from the lists the first time: the object, or
// NotFound when the lists did not have it. ok is false from the second read
// of the same object on: read it from the API server.
func (l *listedRBAC) take(kind, namespace, name string) (obj runtime.Object, err error, ok bool) {
	k := listedKey{kind, namespace, name}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.taken[k] {
		return nil, nil, false
	}
	l.taken[k] = true
	obj, found := l.objs[k]
	if !found {
		return nil, apierrors.NewNotFound(rbacv1.Resource(kind), name), true
	}
	return obj, nil, true
}

// listedGet answers a Get from the lists (take) through wrap, or from the
// API server through live.
func listedGet[T any](l *listedRBAC, kind, namespace, name string, wrap func(runtime.Object) (T, bool), live func(string, string) (T, error)) (T, error) {
	obj, err, ok := l.take(kind, namespace, name)
	if !ok {
		return live(namespace, name)
	}
	if err != nil {
		var none T
		return none, err
	}
	if t, ok := wrap(obj); ok {
		return t, nil
	}
	return live(namespace, name)
}

// listedRoles reads roles and cluster roles from the lists first.
type listedRoles struct {
	reconciliation.RuleOwnerModifier
	kind   string
	listed *listedRBAC
}

func (m listedRoles) Get(namespace, name string) (reconciliation.RuleOwner, error) {
	return listedGet(m.listed, m.kind, namespace, name, func(obj runtime.Object) (reconciliation.RuleOwner, bool) {
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			return reconciliation.ClusterRoleRuleOwner{ClusterRole: o}, true
		case *rbacv1.Role:
			return reconciliation.RoleRuleOwner{Role: o}, true
		}
		return nil, false
	}, m.RuleOwnerModifier.Get)
}

// listedBindings reads role bindings and cluster role bindings from the
// lists first.
type listedBindings struct {
	reconciliation.RoleBindingModifier
	kind   string
	listed *listedRBAC
}

func (m listedBindings) Get(namespace, name string) (reconciliation.RoleBinding, error) {
	return listedGet(m.listed, m.kind, namespace, name, func(obj runtime.Object) (reconciliation.RoleBinding, bool) {
		switch o := obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: o}, true
		case *rbacv1.RoleBinding:
			return reconciliation.RoleBindingAdapter{RoleBinding: o}, true
		}
		return nil, false
	}, m.RoleBindingModifier.Get)
}
