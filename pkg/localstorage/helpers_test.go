package localstorage

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// wait bounds every poll of these tests.
const waitFor = time.Minute

// nodeKubeconfig writes a kubeconfig that acts as node name (the admin's
// credentials impersonating system:node:<name> in system:nodes, which the
// Node authorizer, NodeRestriction and the admission policy see as that
// node) and returns its path.
func nodeKubeconfig(t *testing.T, srv *testapiserver.Server, name string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = nodeUserPrefix + name
		ai.ImpersonateGroups = []string{"system:nodes", "system:authenticated"}
	}
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func nodeClient(t *testing.T, srv *testapiserver.Server, name string) kubernetes.Interface {
	t.Helper()
	c, err := kubeclient.New(nodeKubeconfig(t, srv, name), "test-node", kubeclient.Burst)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	return ctx
}

// createNode registers a Node with the hostname label value hostname.
func createNode(t *testing.T, ctx context.Context, admin kubernetes.Interface, name, hostname string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: hostname}}}
	if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// claim is a claim of class on node (selected by the scheduler; "" for
// none yet).
func claim(ns, name, class, node string, edit func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}
	if node != "" {
		pvc.Annotations[annSelectedNode] = node
	}
	if edit != nil {
		edit(pvc)
	}
	return pvc
}

// waitVolume waits until the volume name exists and cond holds for it.
func waitVolume(t *testing.T, ctx context.Context, c kubernetes.Interface, name, what string, cond func(*corev1.PersistentVolume) bool) *corev1.PersistentVolume {
	t.Helper()
	var pv *corev1.PersistentVolume
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, waitFor, true, func(ctx context.Context) (bool, error) {
		got, err := c.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pv = got
		return cond(got), nil
	})
	if err != nil {
		t.Fatalf("volume %s: %s: %v (last: %+v)", name, what, err, pv)
	}
	return pv
}

// waitEvent waits for an event of reason on the object named name in ns
// whose message contains want, and returns its message.
func waitEvent(t *testing.T, ctx context.Context, c kubernetes.Interface, ns, name, reason, want string) string {
	t.Helper()
	var seen []string
	var msg string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitFor, true, func(ctx context.Context) (bool, error) {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range evs.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, want) {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no event %s containing %q on %s/%s: %v; events: %s", reason, want, ns, name, err, fmt.Sprint(seen))
	}
	return msg
}
