package localstorage

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// startComponent starts c and stops it when the test ends.
func startComponent(t *testing.T, ctx context.Context, c component.Component) {
	t.Helper()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	readyCtx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	if err := c.Ready(readyCtx); err != nil {
		t.Fatalf("%s: %v", c.Name(), err)
	}
}

// cluster is an API server with the server's half running and a node's
// half for each node named, as the server starts them.
type cluster struct {
	srv   *testapiserver.Server
	admin kubernetes.Interface
	root  string
}

func startCluster(t *testing.T, ctx context.Context, root string, nodes ...string) *cluster {
	t.Helper()
	srv := testapiserver.Start(t, ctx)
	c := &cluster{srv: srv, admin: srv.Client(t), root: root}
	if err := Ensure(ctx, c.admin); err != nil {
		t.Fatal(err)
	}
	p, err := NewProvisioner(ProvisionerOptions{Kubeconfig: srv.Kubeconfig, Path: root, Informers: srv.Chain.Informers()})
	if err != nil {
		t.Fatal(err)
	}
	startComponent(t, ctx, p)
	for _, n := range nodes {
		createNode(t, ctx, c.admin, n, n+"-host")
		startComponent(t, ctx, &Node{NodeName: n, Kubeconfig: nodeKubeconfig(t, srv, n), Path: root})
	}
	return c
}

// release does what the volume controller does when a bound volume's
// claim is deleted: the volume is Released.
func (c *cluster) release(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, waitFor, true, func(ctx context.Context) (bool, error) {
		pv, err := c.admin.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pv.Status.Phase = corev1.VolumeReleased
		_, err = c.admin.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// unprotect does what PV protection does for a volume being deleted that
// no claim holds: it drops its finalizer.
func (c *cluster) unprotect(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, waitFor, true, func(ctx context.Context) (bool, error) {
		pv, err := c.admin.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || pv.DeletionTimestamp == nil {
			return false, nil
		}
		pv.Finalizers = slices.DeleteFunc(pv.Finalizers, func(f string) bool { return f == pvProtectionFinalizer })
		_, err = c.admin.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("volume %s: never deleted: %v", name, err)
	}
}

// TestProvision: a claim of the class placed on a node gets a volume there,
// in the shape upstream binds (pre-bound to the claim, node affinity to the
// node's hostname label, the class's reclaim policy), and a directory on
// that node only, 0777 under a 0700 storage path. Released, the volume is
// deleted, its node removes the directory, then the volume is gone. Claims
// not yet placed or of another class are left alone; claims a directory
// cannot serve get an event that says why.
func TestProvision(t *testing.T) {
	ctx := testContext(t)
	root := filepath.Join(t.TempDir(), "storage")
	c := startCluster(t, ctx, root, "n1", "n2")
	admin := c.admin
	const ns = "default"

	pvc, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim(ns, "data", ClassName, "n1", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := VolumeName(string(pvc.UID))
	dir := filepath.Join(root, DirName(name, ns, "data"))
	pv := waitVolume(t, ctx, admin, name, "made", func(*corev1.PersistentVolume) bool { return true })
	checks := []struct {
		what      string
		got, want any
	}{
		{"claimRef", pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name + "/" + string(pv.Spec.ClaimRef.UID), ns + "/data/" + string(pvc.UID)},
		{"path", pv.Spec.Local.Path, dir},
		{"node affinity", pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values, []string{"n1-host"}},
		{"node label", pv.Labels[NodeLabel], "n1"},
		{"reclaim", pv.Spec.PersistentVolumeReclaimPolicy, corev1.PersistentVolumeReclaimDelete},
		{"class", pv.Spec.StorageClassName, ClassName},
		{"capacity", pv.Spec.Capacity.Storage().String(), "1Mi"},
		{"provisioned-by", pv.Annotations[annProvisionedBy], ProvisionerName},
		{"our finalizer", slices.Contains(pv.Finalizers, Finalizer), true},
	}
	for _, ch := range checks {
		if !equal(ch.got, ch.want) {
			t.Errorf("%s: %v, want %v", ch.what, ch.got, ch.want)
		}
	}
	waitEvent(t, ctx, admin, ns, "data", reasonProvisioned, "on node n1 at "+dir)
	waitDir(t, dir, true)
	for path, want := range map[string]os.FileMode{dir: 0o777, root: 0o700} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode().Perm(), err, want)
		}
	}

	// Claims left alone: no node chosen yet, or another class.
	for _, pvc := range []*corev1.PersistentVolumeClaim{claim(ns, "waiting", ClassName, "", nil), claim(ns, "other", "nfs", "n1", nil)} {
		created, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := admin.CoreV1().PersistentVolumes().Get(context.Background(), VolumeName(string(created.UID)), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("claim %s got a volume (%v)", created.Name, err)
			}
		})
	}

	// Claims a directory cannot serve.
	block := corev1.PersistentVolumeBlock
	for _, tt := range []struct {
		name string
		edit func(*corev1.PersistentVolumeClaim)
		want string
	}{
		{"block", func(p *corev1.PersistentVolumeClaim) { p.Spec.VolumeMode = &block }, "volumeMode Block is not supported"},
		{"rwx", func(p *corev1.PersistentVolumeClaim) {
			p.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}, "access mode ReadWriteMany is not supported"},
		{"selector", func(p *corev1.PersistentVolumeClaim) { p.Spec.Selector = &metav1.LabelSelector{} }, "remove spec.selector"},
	} {
		if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim(ns, tt.name, ClassName, "n1", tt.edit), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, ctx, admin, ns, tt.name, reasonProvisionError, tt.want)
	}

	// Released: deleted; the node removes the directory, then the volume goes.
	c.release(t, ctx, name)
	c.unprotect(t, ctx, name)
	waitDir(t, dir, false)
	waitGone(t, ctx, admin, name)
	if _, err := os.Stat(root); err != nil {
		t.Errorf("the storage path went with the volume: %v", err)
	}
}

// TestDeleteWhileBound: a volume deleted while PV protection holds it (a
// claim is bound: a pod may be writing) keeps its directory until the
// volume controller lets go.
func TestDeleteWhileBound(t *testing.T) {
	ctx := testContext(t)
	root := filepath.Join(t.TempDir(), "storage")
	c := startCluster(t, ctx, root, "n1")
	pvc, err := c.admin.CoreV1().PersistentVolumeClaims("default").Create(ctx, claim("default", "data", ClassName, "n1", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := VolumeName(string(pvc.UID))
	pv := waitVolume(t, ctx, c.admin, name, "made", func(*corev1.PersistentVolume) bool { return true })
	if !slices.Contains(pv.Finalizers, pvProtectionFinalizer) {
		t.Fatalf("finalizers %v: the API server added no PV protection", pv.Finalizers)
	}
	dir := pv.Spec.Local.Path
	waitDir(t, dir, true)
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.admin.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVolume(t, ctx, c.admin, name, "being deleted", func(pv *corev1.PersistentVolume) bool { return pv.DeletionTimestamp != nil })
	// The node has seen the deletion when it has handled a later update
	// of the volume: a label the test sets after it.
	pv = waitVolume(t, ctx, c.admin, name, "still there", func(*corev1.PersistentVolume) bool { return true })
	pv.Labels["test"] = "seen"
	if _, err := c.admin.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNodeSaw(t, ctx, c)
	if b, err := os.ReadFile(filepath.Join(dir, "data")); err != nil || string(b) != "kept" {
		t.Fatalf("the directory of a volume still protected was touched: %q, %v", b, err)
	}
	c.unprotect(t, ctx, name) // the claim let go
	waitDir(t, dir, false)
	waitGone(t, ctx, c.admin, name)
}

// waitNodeSaw waits until the node part has worked through its queue: a
// second claim made now has its directory (the queue is one worker, in
// order).
func waitNodeSaw(t *testing.T, ctx context.Context, c *cluster) {
	t.Helper()
	pvc, err := c.admin.CoreV1().PersistentVolumeClaims("default").Create(ctx, claim("default", "marker", ClassName, "n1", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv := waitVolume(t, ctx, c.admin, VolumeName(string(pvc.UID)), "made", func(*corev1.PersistentVolume) bool { return true })
	waitDir(t, pv.Spec.Local.Path, true)
}

func waitDir(t *testing.T, dir string, exists bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, waitFor, true, func(context.Context) (bool, error) {
		_, err := os.Stat(dir)
		return (err == nil) == exists, nil
	}); err != nil {
		t.Fatalf("directory %s exists=%v: %v", dir, !exists, err)
	}
}

func waitGone(t *testing.T, ctx context.Context, c kubernetes.Interface, name string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, waitFor, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("volume %s is still there: %v", name, err)
	}
}

func equal(a, b any) bool {
	as, aok := a.([]string)
	bs, bok := b.([]string)
	if aok && bok {
		return slices.Equal(as, bs)
	}
	return a == b
}
