package localstorage

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	admissionv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
)

// What a node is granted, and what narrows it.
const (
	// NodeRoleName is the ClusterRole, bound to every node, that lets a
	// node's part read the PersistentVolumes (to find its own: the Node
	// authorizer lets a node get a volume of a pod bound to it, never list
	// or watch) and patch them, which PolicyName narrows.
	NodeRoleName = "edgeplane:local-storage-node"
	// PolicyName is the ValidatingAdmissionPolicy (and its binding) that
	// lets a node's update of a PersistentVolume through only when it
	// removes Finalizer, and nothing else, from a volume of that node being
	// deleted.
	PolicyName = "edgeplane-local-storage-node"
)

// NodeRules are the node role's rules.
func NodeRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "patch"},
	}}
}

// nodeUpdateRules are the policy's validations, in CEL, each with what it
// refuses: the volume is one of this provisioner's, of the node's own
// (NodeLabel), being deleted; its spec, labels and annotations stay as they
// were; Finalizer goes and every other finalizer stays.
var nodeUpdateRules = []struct{ expression, message string }{
	{fmt.Sprintf(`has(oldObject.metadata.labels) && '%[1]s' in oldObject.metadata.labels &&
oldObject.metadata.labels['%[1]s'] == request.userInfo.username.substring(%[2]d) &&
has(oldObject.metadata.annotations) && '%[3]s' in oldObject.metadata.annotations &&
oldObject.metadata.annotations['%[3]s'] == '%[4]s'`, NodeLabel, len(nodeUserPrefix), annProvisionedBy, ProvisionerName),
		"a node may update only local-path volumes on itself"},
	{`has(oldObject.metadata.deletionTimestamp)`, "a node may update a local-path volume only once it is being deleted"},
	{`object.spec == oldObject.spec`, "a node may not change a volume's spec"},
	{`has(object.metadata.labels) && object.metadata.labels == oldObject.metadata.labels &&
has(object.metadata.annotations) && object.metadata.annotations == oldObject.metadata.annotations`,
		"a node may not change a volume's labels or annotations"},
	{fmt.Sprintf(`!(has(object.metadata.finalizers) && '%[1]s' in object.metadata.finalizers) &&
has(oldObject.metadata.finalizers) &&
oldObject.metadata.finalizers.all(f, f == '%[1]s' || (has(object.metadata.finalizers) && f in object.metadata.finalizers))`, Finalizer),
		fmt.Sprintf("a node may only remove the finalizer %s", Finalizer)},
}

// EnsureAccess applies the admission policy first and the node role last,
// so that the role never lets a node patch volumes without the policy's
// limit (the API server loads a policy within moments of its creation).
// Applying again is a no-op.
func EnsureAccess(ctx context.Context, client kubernetes.Interface) error {
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	var validations []*admissionv1ac.ValidationApplyConfiguration
	for _, r := range nodeUpdateRules {
		validations = append(validations, admissionv1ac.Validation().WithExpression(r.expression).
			WithReason(metav1.StatusReasonForbidden).WithMessage(r.message))
	}
	policy := admissionv1ac.ValidatingAdmissionPolicy(PolicyName).WithLabels(managedBy).WithSpec(
		admissionv1ac.ValidatingAdmissionPolicySpec().
			WithFailurePolicy(admissionv1.Fail).
			WithMatchConstraints(admissionv1ac.MatchResources().WithResourceRules(
				admissionv1ac.NamedRuleWithOperations().
					WithOperations(admissionv1.Update).
					WithAPIGroups("").WithAPIVersions("v1").WithResources("persistentvolumes"))).
			WithMatchConditions(admissionv1ac.MatchCondition().WithName("nodes").
				WithExpression(fmt.Sprintf("request.userInfo.username.startsWith('%s')", nodeUserPrefix))).
			WithValidations(validations...))
	if _, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Apply(ctx, policy, opts); err != nil {
		return fmt.Errorf("ValidatingAdmissionPolicy %s: %w", PolicyName, err)
	}
	binding := admissionv1ac.ValidatingAdmissionPolicyBinding(PolicyName).WithLabels(managedBy).WithSpec(
		admissionv1ac.ValidatingAdmissionPolicyBindingSpec().WithPolicyName(PolicyName).
			WithValidationActions(admissionv1.Deny))
	if _, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Apply(ctx, binding, opts); err != nil {
		return fmt.Errorf("ValidatingAdmissionPolicyBinding %s: %w", PolicyName, err)
	}
	role := rbacv1ac.ClusterRole(NodeRoleName).WithLabels(managedBy)
	for _, r := range NodeRules() {
		role.WithRules(rbacv1ac.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	if _, err := client.RbacV1().ClusterRoles().Apply(ctx, role, opts); err != nil {
		return fmt.Errorf("ClusterRole %s: %w", NodeRoleName, err)
	}
	roleBinding := rbacv1ac.ClusterRoleBinding(NodeRoleName).WithLabels(managedBy).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(NodeRoleName)).
		WithSubjects(rbacv1ac.Subject().WithAPIGroup(rbacv1.GroupName).WithKind(rbacv1.GroupKind).WithName(user.NodesGroup))
	if _, err := client.RbacV1().ClusterRoleBindings().Apply(ctx, roleBinding, opts); err != nil {
		return fmt.Errorf("ClusterRoleBinding %s: %w", NodeRoleName, err)
	}
	return nil
}

// removeAccess deletes the node role's binding first and the policy last.
func removeAccess(ctx context.Context, client kubernetes.Interface) error {
	for _, del := range []struct {
		what string
		fn   func() error
	}{
		{"ClusterRoleBinding " + NodeRoleName, func() error {
			return client.RbacV1().ClusterRoleBindings().Delete(ctx, NodeRoleName, metav1.DeleteOptions{})
		}},
		{"ClusterRole " + NodeRoleName, func() error {
			return client.RbacV1().ClusterRoles().Delete(ctx, NodeRoleName, metav1.DeleteOptions{})
		}},
		{"ValidatingAdmissionPolicyBinding " + PolicyName, func() error {
			return client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, PolicyName, metav1.DeleteOptions{})
		}},
		{"ValidatingAdmissionPolicy " + PolicyName, func() error {
			return client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, PolicyName, metav1.DeleteOptions{})
		}},
	} {
		if err := del.fn(); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: %w", del.what, err)
		}
	}
	return nil
}
