package chain

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
)

// TestListedRBAC: a read is answered from the lists once (an object, or
// NotFound for one the lists did not have), and from the API server after
// that, so the retry after a conflict sees what is there now.
func TestListedRBAC(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "listed"}})
	listed, err := listRBAC(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	// What changes after the listing: "listed" goes, "added" comes.
	roles := client.RbacV1().ClusterRoles()
	if err := roles.Delete(ctx, "listed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := roles.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "added"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := listedRoles{RuleOwnerModifier: reconciliation.ClusterRoleModifier{Client: roles}, kind: "ClusterRole", listed: listed}
	for _, step := range []struct {
		name      string
		wantFound bool
	}{
		{"listed", true},  // from the lists
		{"listed", false}, // from the API server: deleted since
		{"added", false},  // from the lists: not there when listed
		{"added", true},   // from the API server
	} {
		got, err := m.Get("", step.name)
		switch {
		case step.wantFound && (err != nil || got.GetName() != step.name):
			t.Errorf("Get(%q) = %v, %v; want the role", step.name, got, err)
		case !step.wantFound && !apierrors.IsNotFound(err):
			t.Errorf("Get(%q) = %v, %v; want NotFound", step.name, got, err)
		}
	}
}
