package localstorage

import (
	"context"
	"slices"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// TestEnsureClass: the class is made, default, on a cluster without one;
// it is not made default where another class is; a class of that name
// that is the user's, or ours as the user edited it, is left as it is.
func TestEnsureClass(t *testing.T) {
	ctx := testContext(t)
	srv := testapiserver.Start(t, ctx)
	admin := srv.Client(t)
	userDefault := &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: "nfs", Annotations: map[string]string{annDefaultClass: "true"}},
		Provisioner: "example.com/nfs",
	}
	foreign := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: ClassName}, Provisioner: "rancher.io/local-path"}
	edited := NewClass()
	edited.Annotations = map[string]string{annDefaultClass: "false"}
	tests := []struct {
		name        string
		before      []*storagev1.StorageClass
		wantDefault bool
		wantFrom    *storagev1.StorageClass // the class left as it was; nil: ours made
	}{
		{name: "fresh cluster", wantDefault: true},
		{name: "another default class", before: []*storagev1.StorageClass{userDefault}, wantDefault: false},
		{name: "the user's class of that name", before: []*storagev1.StorageClass{foreign}, wantFrom: foreign},
		{name: "ours, no longer default", before: []*storagev1.StorageClass{edited}, wantFrom: edited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deleteClasses(t, ctx, admin)
			rvs := map[string]string{}
			for _, c := range tt.before {
				made, err := admin.StorageV1().StorageClasses().Create(ctx, c, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				rvs[made.Name] = made.ResourceVersion
			}
			for range 2 { // again: a restart
				if err := Ensure(ctx, admin); err != nil {
					t.Fatal(err)
				}
			}
			got, err := admin.StorageV1().StorageClasses().Get(ctx, ClassName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for name, rv := range rvs {
				c, err := admin.StorageV1().StorageClasses().Get(ctx, name, metav1.GetOptions{})
				if err != nil || c.ResourceVersion != rv {
					t.Errorf("the user's class %s was touched: %v", name, err)
				}
			}
			if tt.wantFrom != nil {
				return
			}
			if got.Provisioner != ProvisionerName || *got.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer || *got.ReclaimPolicy != "Delete" {
				t.Errorf("class %+v", got)
			}
			if isDefault := got.Annotations[annDefaultClass] == "true"; isDefault != tt.wantDefault {
				t.Errorf("default: %v, want %v", isDefault, tt.wantDefault)
			}
		})
	}
}

// TestDisable: --disable=local-storage removes our class (not a class of
// that name that is the user's), the nodes' access, and the finalizer of
// our volumes, which stay; enabling again puts the finalizer back.
func TestDisable(t *testing.T) {
	ctx := testContext(t)
	srv := testapiserver.Start(t, ctx)
	admin := srv.Client(t)
	if err := Ensure(ctx, admin); err != nil {
		t.Fatal(err)
	}
	pv := testVolume("pvc-kept", "n1", Finalizer)
	if _, err := admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Disable(ctx, admin); err != nil {
		t.Fatal(err)
	}
	for what, get := range map[string]func() error{
		"class": func() error {
			_, err := admin.StorageV1().StorageClasses().Get(ctx, ClassName, metav1.GetOptions{})
			return err
		},
		"role binding": func() error {
			_, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, NodeRoleName, metav1.GetOptions{})
			return err
		},
		"role": func() error {
			_, err := admin.RbacV1().ClusterRoles().Get(ctx, NodeRoleName, metav1.GetOptions{})
			return err
		},
		"policy": func() error {
			_, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, PolicyName, metav1.GetOptions{})
			return err
		},
		"policy binding": func() error {
			_, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, PolicyName, metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); !apierrors.IsNotFound(err) {
			t.Errorf("%s after --disable: %v, want not found", what, err)
		}
	}
	got, err := admin.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the volume went with --disable: %v", err)
	}
	if slices.Contains(got.Finalizers, Finalizer) {
		t.Errorf("finalizers %v after --disable: a deletion would wait for nodes that no longer remove directories", got.Finalizers)
	}

	// The user's class of that name stays.
	foreign := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: ClassName}, Provisioner: "rancher.io/local-path"}
	if _, err := admin.StorageV1().StorageClasses().Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Disable(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.StorageV1().StorageClasses().Get(ctx, ClassName, metav1.GetOptions{}); err != nil {
		t.Errorf("the user's class went with --disable: %v", err)
	}

	// Enabled again: the finalizer is back.
	if err := Ensure(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if got, err = admin.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{}); err != nil || !slices.Contains(got.Finalizers, Finalizer) {
		t.Errorf("finalizers %v (%v) after enabling again, want %s", got.Finalizers, err, Finalizer)
	}
}

func deleteClasses(t *testing.T, ctx context.Context, c kubernetes.Interface) {
	t.Helper()
	if err := c.StorageV1().StorageClasses().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}
