package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/edgeplane/edgeplane/internal/testing/testchart"
)

// helmChartFile is a k3s user's HelmChart file: the chart in chartContent
// (airgap), installed into a namespace it creates, with valuesContent.
func helmChartFile(content, greeting string) string {
	return fmt.Sprintf(`apiVersion: helm.cattle.io/v1
kind: HelmChart
metadata:
  name: greeter
  namespace: kube-system
spec:
  chartContent: %s
  targetNamespace: greeter-apps
  createNamespace: true
  valuesContent: |-
    greeting: %s
`, content, greeting)
}

// TestHelmChartManifests runs the helm-controller in the binary, as a
// control plane. A cluster started with --disable=helm-controller (as one
// made before the controller existed) has no HelmChart API. At its next
// start without it, a HelmChart file in <data-dir>/manifests installs its
// chart, with the user's objects untouched; a changed file upgrades the
// release, a removed file uninstalls it.
func TestHelmChartManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	parallel(t, 65*time.Second)
	dataDir := t.TempDir()
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	charts := schema.GroupVersionResource{Group: "helm.cattle.io", Version: "v1", Resource: "helmcharts"}
	ctx := context.Background()

	s := startServer(t, dataDir, "--disable=helm-controller")
	dyn := dynamic.NewForConfigOrDie(s.config)
	if _, err := dyn.Resource(crds).Get(ctx, "helmcharts.helm.cattle.io", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("with --disable=helm-controller the HelmChart CRD is there (err %v)", err)
	}
	users := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "users-own", "namespace": "kube-system"},
		"data":     map[string]any{"k": "v"},
	}}
	cmGVR := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	users, err := dyn.Resource(cmGVR).Namespace("kube-system").Create(ctx, users, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.stop()

	content := testchart.Base64(t, "greeter", "0.1.0", testchart.ConfigMapTemplate)
	file := filepath.Join(dataDir, "manifests", "greeter.yaml")
	writeConfig(t, file, helmChartFile(content, "hello"))
	s = startServer(t, dataDir)
	s.mustKeepRunning(t)
	dyn = dynamic.NewForConfigOrDie(s.config)
	greeting := func(want string) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			cm, err := s.client.CoreV1().ConfigMaps("greeter-apps").Get(ctx, "greeter-cm", metav1.GetOptions{})
			if want == "" {
				return apierrors.IsNotFound(err), fmt.Errorf("greeter-cm: %v", err)
			}
			if err != nil {
				return false, err
			}
			return cm.Data["greeting"] == want, fmt.Errorf("greeting %q", cm.Data["greeting"])
		}
	}
	began := time.Now()
	// Within the 30 s between checks of the directory: it is checked again
	// once the HelmChart CRD is served.
	eventually(t, 20*time.Second, "the chart of greeter.yaml installed", greeting("hello"))
	t.Logf("installed %.1f s after the server was ready", time.Since(began).Seconds())
	got, err := dyn.Resource(cmGVR).Namespace("kube-system").Get(ctx, "users-own", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetResourceVersion() != users.GetResourceVersion() {
		t.Errorf("the user's ConfigMap was written at the start with the helm-controller: resourceVersion %s -> %s", users.GetResourceVersion(), got.GetResourceVersion())
	}

	// The directory is checked every 30 s.
	writeConfig(t, file, helmChartFile(content, "bonjour"))
	eventually(t, 2*time.Minute, "the release upgraded by the changed file", greeting("bonjour"))
	eventually(t, 30*time.Second, "the HelmChart's Deployed condition at revision 2", func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(charts).Namespace("kube-system").Get(ctx, "greeter", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Deployed" && m["status"] == "True" && strings.Contains(fmt.Sprint(m["message"]), "revision 2") {
				return true, nil
			}
		}
		return false, fmt.Errorf("conditions %v", conds)
	})

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the release uninstalled with its file removed", greeting(""))
	eventually(t, 30*time.Second, "the HelmChart gone", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(charts).Namespace("kube-system").Get(ctx, "greeter", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Errorf("HelmChart greeter: %v", err)
	})
	secrets, err := s.client.CoreV1().Secrets("greeter-apps").List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=greeter"})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("%d release records left after the uninstall", len(secrets.Items))
	}
}
