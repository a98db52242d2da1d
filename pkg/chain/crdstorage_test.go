package chain

import (
	"context"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/pkg/datastore"
)

// TestCustomResourcesOnSharedClients: a custom resource's storage, made
// when the resource is first served, takes its client from the shared pool,
// so that with the datastore in the process it does not need the
// datastore's socket. On upstream's getter it dialled the socket for a
// client of its own; with the socket gone (kine's listener closed under a
// running server, as a dying datastore does) the first request for a new
// CRD waited 20 s on that dial, holding apiextensions' lock for every CRD,
// and a server stopping because its datastore died waited for it past its
// stop timeout (TestDatastoreDeathStopsServer, 1 run in ~10).
func TestCustomResourcesOnSharedClients(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a real chain on kine")
	}
	ctx := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0))))
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	env := newChainEnv(t, ctx)
	s := env.startInProcessServer(t, ctx)
	cfg := s.LoopbackConfig()
	crds, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// kine's socket closed; the in-process client still reaches SQLite.
	if err := datastore.InjectFault(env.store); err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: new(true),
				}},
			}},
		},
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the CRD was not established: %v", err)
	}

	// The first request for the resource makes its storage.
	const within = 5 * time.Second
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace("default")
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w"},
	}}
	reqCtx, reqCancel := context.WithTimeout(ctx, within)
	defer reqCancel()
	begin := time.Now()
	if _, err := widgets.Create(reqCtx, w, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the first Widget with the datastore's socket gone: %v after %s (want it served within %s on the in-process client)", err, time.Since(begin).Round(time.Millisecond), within)
	}
	if _, err := widgets.Get(reqCtx, "w", metav1.GetOptions{}); err != nil {
		t.Fatalf("reading it back: %v", err)
	}
}
