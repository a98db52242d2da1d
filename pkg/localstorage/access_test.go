package localstorage

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// testVolume is a volume of ours on node, with the finalizers given.
func testVolume(name, node string, finalizers ...string) *corev1.PersistentVolume {
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: ClassName}}
	pvc := claim("default", "c-"+name, ClassName, node, nil)
	pvc.UID = types.UID(strings.TrimPrefix(name, "pvc-"))
	pv := newVolume(pvc, class, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, "/var/lib/edgeplane/storage")
	pv.Finalizers = finalizers
	return pv
}

// finalizerPatch is a patch that sets a volume's finalizers.
func finalizerPatch(finalizers ...string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": finalizers}})
	return b
}

// TestNodeAccess: what a node may do with volumes, on the real API server
// (Node authorizer, RBAC, NodeRestriction, the admission policy). It reads
// them; it may patch one only to drop Finalizer from a volume of its own
// that is being deleted; everything else is refused: making, deleting or
// editing volumes, another node's volume, a volume not being deleted,
// dropping another finalizer, and reading claims or secrets.
func TestNodeAccess(t *testing.T) {
	ctx := testContext(t)
	srv := testapiserver.Start(t, ctx)
	admin := srv.Client(t)
	if err := EnsureAccess(ctx, admin); err != nil {
		t.Fatal(err)
	}
	const keep = "example.com/keep"
	mine := testVolume("pvc-mine", "n1", Finalizer, keep)
	other := testVolume("pvc-other", "n2", Finalizer)
	alive := testVolume("pvc-alive", "n1", Finalizer)
	for _, pv := range []*corev1.PersistentVolume{mine, other, alive} {
		if _, err := admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{mine.Name, other.Name} {
		if err := admin.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n1 := nodeClient(t, srv, "n1")
	mergePatch := func(name string, patch []byte) error {
		_, err := n1.CoreV1().PersistentVolumes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	// The policy may take a moment to load after its creation: wait until
	// it refuses the first case.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, waitFor, true, func(context.Context) (bool, error) {
		err := mergePatch(alive.Name, finalizerPatch())
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), nil
	}); err != nil {
		t.Fatalf("the policy never refused a node's patch of a volume not being deleted: %v", err)
	}

	refused := []struct {
		name string
		do   func(kubernetes.Interface) error
	}{
		{"create a volume", func(c kubernetes.Interface) error {
			_, err := c.CoreV1().PersistentVolumes().Create(ctx, testVolume("pvc-new", "n1"), metav1.CreateOptions{})
			return err
		}},
		{"delete its own volume", func(c kubernetes.Interface) error {
			return c.CoreV1().PersistentVolumes().Delete(ctx, alive.Name, metav1.DeleteOptions{})
		}},
		{"drop the finalizer of its volume not being deleted", func(kubernetes.Interface) error {
			return mergePatch(alive.Name, finalizerPatch())
		}},
		{"drop the finalizer of another node's volume", func(kubernetes.Interface) error {
			return mergePatch(other.Name, finalizerPatch())
		}},
		{"drop another finalizer with ours", func(kubernetes.Interface) error {
			return mergePatch(mine.Name, finalizerPatch())
		}},
		{"change the reclaim policy with the finalizer", func(kubernetes.Interface) error {
			return mergePatch(mine.Name, []byte(`{"metadata":{"finalizers":["`+keep+`"]},"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`))
		}},
		{"change its node label", func(kubernetes.Interface) error {
			return mergePatch(mine.Name, []byte(`{"metadata":{"labels":{"`+NodeLabel+`":"n2"}}}`))
		}},
		{"change an annotation", func(kubernetes.Interface) error {
			return mergePatch(mine.Name, []byte(`{"metadata":{"annotations":{"`+annProvisionedBy+`":"x"}}}`))
		}},
		{"update the volume's status", func(c kubernetes.Interface) error {
			_, err := c.CoreV1().PersistentVolumes().Patch(ctx, alive.Name, types.MergePatchType, []byte(`{"status":{"phase":"Released"}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"list claims", func(c kubernetes.Interface) error {
			_, err := c.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list secrets", func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"change the StorageClass", func(c kubernetes.Interface) error {
			_, err := c.StorageV1().StorageClasses().Create(ctx, NewClass(), metav1.CreateOptions{})
			return err
		}},
	}
	for _, tt := range refused {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			err := tt.do(n1)
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want a refusal", err)
			}
			t.Logf("refused: %v", err)
		})
	}

	t.Run("allowed: list volumes", func(t *testing.T) {
		l, err := n1.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: NodeLabel + "=n1"})
		if err != nil || len(l.Items) != 2 {
			t.Fatalf("list: %v (%d volumes), want n1's 2", err, len(l.Items))
		}
	})
	t.Run("allowed: drop ours from its volume being deleted", func(t *testing.T) {
		pv, err := admin.CoreV1().PersistentVolumes().Get(ctx, mine.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The API server added PV protection's finalizer: that one stays.
		want := slices.DeleteFunc(slices.Clone(pv.Finalizers), func(f string) bool { return f == Finalizer })
		if len(want) != 2 {
			t.Fatalf("finalizers %v: want ours, %s and PV protection's", pv.Finalizers, keep)
		}
		if err := mergePatch(mine.Name, finalizerPatch(want...)); err != nil {
			t.Fatal(err)
		}
		if pv, err = admin.CoreV1().PersistentVolumes().Get(ctx, mine.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(pv.Finalizers, want) {
			t.Fatalf("finalizers %v, want %v", pv.Finalizers, want)
		}
	})
}
