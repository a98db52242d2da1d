package chain

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	"k8s.io/klog/v2"
	schedulingapiv1 "k8s.io/kubernetes/pkg/apis/scheduling/v1"
	rbacrest "k8s.io/kubernetes/pkg/registry/rbac/rest"
	schedulingrest "k8s.io/kubernetes/pkg/registry/scheduling/rest"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

// The API server creates the default RBAC roles and bindings and the system
// priority classes in two post-start hooks, and /readyz waits for both. Both
// upstream hooks start with wait.Poll(1*time.Second, ...), which sleeps a
// whole second before the first attempt: every start of every configuration,
// upstream's included, spends that second doing nothing (docs/PERFORMANCE.md,
// "Start-up"). edgeplane replaces them with hooks that do the same work from
// the same upstream data (bootstrappolicy, SystemPriorityClasses) with the
// same reconciliation, but try at once and then every second, for the same
// 30 s.
//
// Upstream's RBAC hook also migrates roles and bindings of clusters created
// before Kubernetes 1.9 (primeAggregatedClusterRoles,
// primeSplitClusterRoleBindings); an edgeplane data dir is never that old, so
// those steps, which find nothing to do on newer data, are left out.
const (
	bootstrapRolesHook           = "edgeplane/bootstrap-roles"
	bootstrapPriorityClassesHook = "edgeplane/bootstrap-system-priority-classes"
	bootstrapRetry               = time.Second
	bootstrapTimeout             = 30 * time.Second
	bootstrapWorkers             = 8
)

// replacedHooks are the upstream hooks bootstrapHooks stands in for (the
// last: systemnamespace.go).
var replacedHooks = []string{rbacrest.PostStartHookName, schedulingrest.PostStartHookName, upstreamLegacyTokenTrackingHook}

// bootstrapHooks returns edgeplane's hooks for the upstream hooks that are on
// in disabled (before tune turns them off), keyed by name.
func bootstrapHooks(disabled sets.String) map[string]genericapiserver.PostStartHookFunc {
	hooks := map[string]genericapiserver.PostStartHookFunc{}
	if !disabled.Has(rbacrest.PostStartHookName) {
		hooks[bootstrapRolesHook] = retryingHook(bootstrapRolesHook, ensureRBACPolicy)
	}
	if !disabled.Has(schedulingrest.PostStartHookName) {
		hooks[bootstrapPriorityClassesHook] = retryingHook(bootstrapPriorityClassesHook, ensurePriorityClasses)
	}
	if !disabled.Has(upstreamLegacyTokenTrackingHook) {
		hooks[legacyTokenTrackingHook] = startLegacyTokenTracking
	}
	return hooks
}

// retryingHook runs attempt at once, then every second until it is done,
// for at most 30 s; not done by then fails the hook, and with it the start,
// as upstream's hooks do. attempt logs what it could not do.
func retryingHook(name string, attempt func(context.Context, kubernetes.Interface) bool) genericapiserver.PostStartHookFunc {
	return func(hc genericapiserver.PostStartHookContext) error {
		client, err := kubernetes.NewForConfig(hc.LoopbackClientConfig)
		if err != nil {
			return err
		}
		err = wait.PollUntilContextTimeout(hc.Context, bootstrapRetry, bootstrapTimeout, true,
			func(ctx context.Context) (bool, error) { return attempt(ctx, client), nil })
		if err != nil {
			return fmt.Errorf("%s: not done after %s (see the log): %w", name, bootstrapTimeout, err)
		}
		return nil
	}
}

func isConflictOrServiceUnavailable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsServiceUnavailable(err)
}

// BootstrapObject is one object of upstream's bootstrap RBAC policy and the
// reconcile that brings it in line.
type BootstrapObject struct {
	Kind, Namespace, Name string
	// Reconcile compares the object with the policy and, when confirm was
	// set, creates or updates it.
	Reconcile func() (op reconciliation.ReconcileOperation, protected bool, err error)
}

// BootstrapRBAC lists upstream's bootstrap cluster roles, cluster role
// bindings, roles and role bindings with their reconciles through client;
// without confirm a reconcile only reports what it would do.
func BootstrapRBAC(client kubernetes.Interface, confirm bool) []BootstrapObject {
	return bootstrapRBAC(client, confirm, nil)
}

// bootstrapRBAC is BootstrapRBAC reading existing objects from listed first
// when it is not nil.
func bootstrapRBAC(client kubernetes.Interface, confirm bool, listed *listedRBAC) []BootstrapObject {
	var objs []BootstrapObject
	roleClient := func(kind string, m reconciliation.RuleOwnerModifier) reconciliation.RuleOwnerModifier {
		if listed == nil {
			return m
		}
		return listedRoles{RuleOwnerModifier: m, kind: kind, listed: listed}
	}
	bindingClient := func(kind string, m reconciliation.RoleBindingModifier) reconciliation.RoleBindingModifier {
		if listed == nil {
			return m
		}
		return listedBindings{RoleBindingModifier: m, kind: kind, listed: listed}
	}
	role := func(kind, namespace, name string, o reconciliation.ReconcileRoleOptions) {
		o.Confirm = confirm
		objs = append(objs, BootstrapObject{Kind: kind, Namespace: namespace, Name: name,
			Reconcile: func() (reconciliation.ReconcileOperation, bool, error) {
				res, err := o.Run()
				return res.Operation, res.Protected, err
			}})
	}
	binding := func(kind, namespace, name string, o reconciliation.ReconcileRoleBindingOptions) {
		o.Confirm = confirm
		objs = append(objs, BootstrapObject{Kind: kind, Namespace: namespace, Name: name,
			Reconcile: func() (reconciliation.ReconcileOperation, bool, error) {
				res, err := o.Run()
				return res.Operation, res.Protected, err
			}})
	}
	rbac, namespaces := client.RbacV1(), client.CoreV1().Namespaces()
	for _, r := range append(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()...) {
		role("ClusterRole", "", r.Name, reconciliation.ReconcileRoleOptions{Role: reconciliation.ClusterRoleRuleOwner{ClusterRole: &r},
			Client: roleClient("ClusterRole", reconciliation.ClusterRoleModifier{Client: rbac.ClusterRoles()})})
	}
	for _, b := range append(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()...) {
		binding("ClusterRoleBinding", "", b.Name, reconciliation.ReconcileRoleBindingOptions{RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: &b},
			Client: bindingClient("ClusterRoleBinding", reconciliation.ClusterRoleBindingClientAdapter{Client: rbac.ClusterRoleBindings()})})
	}
	for ns, roles := range bootstrappolicy.NamespaceRoles() {
		for _, r := range roles {
			role("Role", ns, r.Name, reconciliation.ReconcileRoleOptions{Role: reconciliation.RoleRuleOwner{Role: &r},
				Client: roleClient("Role", reconciliation.RoleModifier{Client: rbac, NamespaceClient: namespaces})})
		}
	}
	for ns, bindings := range bootstrappolicy.NamespaceRoleBindings() {
		for _, b := range bindings {
			binding("RoleBinding", ns, b.Name, reconciliation.ReconcileRoleBindingOptions{RoleBinding: reconciliation.RoleBindingAdapter{RoleBinding: &b},
				Client: bindingClient("RoleBinding", reconciliation.RoleBindingClientAdapter{Client: rbac, NamespaceClient: namespaces})})
		}
	}
	return objs
}

// ensureRBACPolicy creates or reconciles the bootstrap RBAC policy. It tries
// every object and reports not done if any failed, so the next attempt
// retries them.
func ensureRBACPolicy(ctx context.Context, client kubernetes.Interface) bool {
	logger := klog.FromContext(ctx)
	// The datastore must answer before reconciling starts; what exists is
	// read with four LISTs, not a GET per object.
	listed, err := listRBAC(ctx, client)
	if err != nil {
		logger.Info("Waiting to create the bootstrap RBAC policy", "err", err)
		return false
	}
	// Reconciled by a few workers at once: on a first start every object is
	// a create, and with SQLite's fsync at every commit one at a time took
	// ~0.5 s; concurrent commits share their fsyncs (group commit).
	var g errgroup.Group
	g.SetLimit(bootstrapWorkers)
	for _, o := range bootstrapRBAC(client, true, listed) {
		g.Go(func() error { return reconcileBootstrapObject(logger, o) })
	}
	return g.Wait() == nil
}

// reconcileBootstrapObject reconciles o, retrying conflicts; the error is
// logged.
func reconcileBootstrapObject(logger klog.Logger, o BootstrapObject) error {
	err := retry.OnError(retry.DefaultBackoff, isConflictOrServiceUnavailable, func() error {
		op, protected, err := o.Reconcile()
		switch {
		case err != nil:
			return err
		case protected && op != reconciliation.ReconcileNone:
			logger.Info("Skipped a reconcile-protected object that lacks bootstrap permissions", "kind", o.Kind, "namespace", o.Namespace, "name", o.Name)
		case op != reconciliation.ReconcileNone:
			logger.V(2).Info("Reconciled bootstrap RBAC", "kind", o.Kind, "namespace", o.Namespace, "name", o.Name, "operation", op)
		}
		return nil
	})
	if err != nil {
		logger.Error(err, "Reconciling bootstrap RBAC", "kind", o.Kind, "namespace", o.Namespace, "name", o.Name)
	}
	return err
}

// ensurePriorityClasses creates the system priority classes that do not
// exist; like upstream it leaves existing ones as they are. A failed read or
// create is retried at the next attempt.
func ensurePriorityClasses(ctx context.Context, client kubernetes.Interface) bool {
	logger := klog.FromContext(ctx)
	pcs := client.SchedulingV1().PriorityClasses()
	for _, pc := range schedulingapiv1.SystemPriorityClasses() {
		_, err := pcs.Get(ctx, pc.Name, metav1.GetOptions{})
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			logger.Info("Waiting to read a system PriorityClass", "name", pc.Name, "err", err)
			return false
		}
		if _, err = pcs.Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			logger.Info("Waiting to create a system PriorityClass", "name", pc.Name, "err", err)
			return false
		}
		logger.V(2).Info("Created a system PriorityClass", "name", pc.Name, "value", pc.Value)
	}
	return true
}
