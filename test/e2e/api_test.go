package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"
)

// TestControlPlane drives a real edgeplane binary on each datastore the way a
// user would: client-go for every kind of resource, kubectl for discovery and
// apply, then a restart on the same data dir.
func TestControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real server")
	}
	parallel(t, 40*time.Second)
	for _, ds := range datastoreCases {
		t.Run(ds, func(t *testing.T) {
			dir := t.TempDir()
			s := startServer(t, dir, "--datastore", ds)
			caBefore := readFile(t, filepath.Join(dir, "tls", "server-ca.crt"))

			t.Run("health endpoints are anonymous, the API is not", func(t *testing.T) { testAnonymous(t, s) })
			t.Run("bootstrap RBAC and priority classes", func(t *testing.T) { testBootstrapPolicy(t, s) })
			t.Run("configmaps", func(t *testing.T) { testConfigMaps(t, s) })
			t.Run("secrets", func(t *testing.T) { testSecrets(t, s) })
			t.Run("namespaces", func(t *testing.T) { testNamespaces(t, s) })
			t.Run("deployment", func(t *testing.T) { testDeployment(t, s) })
			t.Run("custom resources", func(t *testing.T) { testCustomResources(t, s) })
			t.Run("apiservice", func(t *testing.T) { testAPIService(t, s) })
			t.Run("kubectl", func(t *testing.T) { testKubectl(t, s) })

			s.stop()
			s2 := startServer(t, dir, "--datastore", ds)
			t.Run("restart keeps data and certificates", func(t *testing.T) {
				if got := readFile(t, filepath.Join(dir, "tls", "server-ca.crt")); got != caBefore {
					t.Fatal("the cluster CA changed across a restart")
				}
				cm, err := s2.client.CoreV1().ConfigMaps("default").Get(context.Background(), "kept", metav1.GetOptions{})
				if err != nil {
					t.Fatalf("configmap written before the restart: %v", err)
				}
				if cm.Data["k"] != "v2" {
					t.Fatalf("configmap data after restart = %v, want k=v2", cm.Data)
				}
				if _, err := s2.client.AppsV1().Deployments("default").Get(context.Background(), "web", metav1.GetOptions{}); err != nil {
					t.Fatalf("deployment applied with kubectl before the restart: %v", err)
				}
			})
			s2.stop()
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func testAnonymous(t *testing.T, s *server) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.config.CAData) {
		t.Fatal("kubeconfig holds no CA")
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	for path, want := range map[string]int{"/readyz": 200, "/livez": 200, "/healthz": 200, "/api/v1/namespaces": 401, "/version": 401} {
		resp, err := c.Get(s.config.Host + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("anonymous GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
	// TLS 1.1 is refused.
	old := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11}}}
	if resp, err := old.Get(s.config.Host + "/readyz"); err == nil {
		_ = resp.Body.Close()
		t.Error("a TLS 1.1 client was served")
	}
}

func testConfigMaps(t *testing.T, s *server) {
	ctx := context.Background()
	cms := s.client.CoreV1().ConfigMaps("default")
	w, err := cms.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=kept"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = "v2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, watch.Added, watch.Modified)
	got, err := cms.Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v2" {
		t.Fatalf("get after update: %v %v", got, err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, item := range list.Items {
		names[item.Name] = true
	}
	if !names["kept"] || !names["gone"] {
		t.Fatalf("list = %v, want kept and gone", names)
	}
	if err := cms.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "gone", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want NotFound", err)
	}
}

// expectEvents reads len(want) events from w, in order.
func expectEvents(t *testing.T, w watch.Interface, want ...watch.EventType) {
	t.Helper()
	for _, typ := range want {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed, want %s", typ)
			}
			if ev.Type != typ {
				t.Fatalf("watch event %s, want %s", ev.Type, typ)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s event within 30s", typ)
		}
	}
}

func testSecrets(t *testing.T, s *server) {
	ctx := context.Background()
	secrets := s.client.CoreV1().Secrets("default")
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": "hunter2"}}
	if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := secrets.Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Data["password"]) != "hunter2" {
		t.Fatalf("secret data = %q", got.Data["password"])
	}
	got.Data["password"] = []byte("correct horse")
	if _, err := secrets.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Read back through the API server (and so through decryption, with
	// Secrets encrypted at rest): the update is what is stored.
	updated, err := secrets.Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(updated.Data["password"]) != "correct horse" || updated.ResourceVersion == got.ResourceVersion {
		t.Fatalf("after the update the secret reads %q at resourceVersion %s (before: %s), want \"correct horse\" at a new one",
			updated.Data["password"], updated.ResourceVersion, got.ResourceVersion)
	}
	if err := secrets.Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func testNamespaces(t *testing.T, s *server) {
	ctx := context.Background()
	nss := s.client.CoreV1().Namespaces()
	if _, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"team": "a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := nss.List(ctx, metav1.ListOptions{LabelSelector: "team=a"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("list team=a: %d items, %v", len(list.Items), err)
	}
	for _, sys := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		if _, err := nss.Get(ctx, sys, metav1.GetOptions{}); err != nil {
			t.Errorf("system namespace %s: %v", sys, err)
		}
	}
	if err := nss.Delete(ctx, "team-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Deletion is accepted; the namespace controller finishes it (issue 3).
	ns, err := nss.Get(ctx, "team-a", metav1.GetOptions{})
	if err == nil && ns.DeletionTimestamp == nil {
		t.Fatal("namespace deleted but has no deletion timestamp")
	}
}

func testDeployment(t *testing.T, s *server) {
	ctx := context.Background()
	deps := s.client.AppsV1().Deployments("default")
	labels := map[string]string{"app": "api"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "api"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "api", Image: "nginx"}}},
			},
		},
	}
	if _, err := deps.Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The deployment controller writes the object too (its revision
	// annotation, its status): read and update again on a conflict, as any
	// client must.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := deps.Get(ctx, "api", metav1.GetOptions{})
		if err != nil {
			return err
		}
		got.Spec.Replicas = ptr.To[int32](3)
		_, err = deps.Update(ctx, got, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	scale, err := deps.GetScale(ctx, "api", metav1.GetOptions{})
	if err != nil || scale.Spec.Replicas != 3 {
		t.Fatalf("scale = %v, %v; want 3 replicas", scale, err)
	}
	if err := deps.Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func testCustomResources(t *testing.T, s *server) {
	ctx := context.Background()
	ext := apiextensionsclient.NewForConfigOrDie(s.config)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.edgeplane.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.edgeplane.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}},
					},
				}},
			}},
		},
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the CRD to be established", func(ctx context.Context) (bool, error) {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	dyn := dynamic.NewForConfigOrDie(s.config)
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "example.edgeplane.io", Version: "v1", Resource: "widgets"}).Namespace("default")
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.edgeplane.io/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	// The CRD's storage may take a moment after Established to serve.
	eventually(t, 30*time.Second, "a custom resource to be created", func(ctx context.Context) (bool, error) {
		_, err := widgets.Create(ctx, obj, metav1.CreateOptions{})
		return err == nil, err
	})
	got, err := widgets.Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 3 {
		t.Fatalf("widget spec.size = %d, want 3", size)
	}
}

func testAPIService(t *testing.T, s *server) {
	ctx := context.Background()
	agg := aggregatorclient.NewForConfigOrDie(s.config)
	svc := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1alpha1.metrics.example.edgeplane.io"},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: "metrics.example.edgeplane.io", Version: "v1alpha1",
			Service:              &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics", Port: ptr.To[int32](443)},
			GroupPriorityMinimum: 100, VersionPriority: 10, InsecureSkipTLSVerify: true,
		},
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := agg.ApiregistrationV1().APIServices().Get(ctx, svc.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	// The built-in groups are registered as local APIServices by the aggregator.
	if _, err := agg.ApiregistrationV1().APIServices().Get(ctx, "v1.apps", metav1.GetOptions{}); err != nil {
		t.Fatalf("local APIService v1.apps: %v", err)
	}
	if err := agg.ApiregistrationV1().APIServices().Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

const manifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.edgeplane.io
spec:
  group: example.edgeplane.io
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

const customResource = `apiVersion: example.edgeplane.io/v1
kind: Gadget
metadata:
  name: g1
  namespace: default
spec:
  colour: blue
`

func testKubectl(t *testing.T, s *server) {
	out, err := s.kubectl("version", "-o", "json")
	if err != nil || !strings.Contains(out, `"gitVersion": "v1.37.2"`) {
		t.Fatalf("kubectl version: %v\n%s", err, out)
	}
	// The in-process controllers report through the API server's /readyz.
	eventually(t, 30*time.Second, "controller checks in /readyz", func(context.Context) (bool, error) {
		out, err := s.kubectl("get", "--raw", "/readyz?verbose")
		if err != nil {
			return false, &kubectlError{out}
		}
		return strings.Contains(out, "[+]controller-manager ok") && strings.Contains(out, "[+]scheduler ok"), nil
	})
	out, err = s.kubectl("api-resources")
	if err != nil {
		t.Fatalf("kubectl api-resources: %v\n%s", err, out)
	}
	for _, want := range []string{"deployments", "customresourcedefinitions", "apiservices", "configmaps", "leases"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl api-resources lacks %s", want)
		}
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "app.yaml"), manifest)
	writeFile(t, filepath.Join(dir, "gadget.yaml"), customResource)
	if out, err := s.kubectl("apply", "-f", filepath.Join(dir, "app.yaml")); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	if out, err := s.kubectl("wait", "--for", "condition=Established", "--timeout", "30s", "crd/gadgets.example.edgeplane.io"); err != nil {
		t.Fatalf("kubectl wait crd: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "kubectl apply of a custom resource", func(context.Context) (bool, error) {
		out, err := s.kubectl("apply", "-f", filepath.Join(dir, "gadget.yaml"))
		if err != nil {
			return false, &kubectlError{out}
		}
		return true, nil
	})
	out, err = s.kubectl("get", "deployment/web", "gadget/g1", "-o", "name")
	if err != nil || !strings.Contains(out, "deployment.apps/web") || !strings.Contains(out, "gadget.example.edgeplane.io/g1") {
		t.Fatalf("kubectl get: %v\n%s", err, out)
	}
	out, err = s.kubectl("get", "gadget", "g1", "-o", "jsonpath={.spec.colour}")
	if err != nil || out != "blue" {
		t.Fatalf("kubectl get gadget: %v %q", err, out)
	}
	// The kube-apiserver's OpenAPI is installed by pkg/chain, v3 built on
	// request: explain reads v3; the default profile still serves v2.
	if out, err := s.kubectl("explain", "deployment.spec.replicas"); err != nil || !strings.Contains(out, "FIELD: replicas <integer>") {
		t.Fatalf("kubectl explain: %v\n%s", err, out)
	}
	if out, err := s.kubectl("get", "--raw", "/openapi/v2"); err != nil || !strings.Contains(out, `"io.k8s.api.apps.v1.Deployment"`) || !strings.Contains(out, `"/apis/apps/v1/namespaces/{namespace}/deployments"`) {
		t.Fatalf("GET /openapi/v2 lacks the Deployment: %v\n%.300s", err, out)
	}
}

type kubectlError struct{ out string }

func (e *kubectlError) Error() string { return e.out }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
