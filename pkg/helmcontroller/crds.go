package helmcontroller

import (
	"context"
	"embed"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

//go:embed crds/*.yaml
var crdFiles embed.FS

// fieldManager is the server-side apply field manager of the CRDs.
const fieldManager = "edgeplane"

// CRDs are the HelmChart and HelmChartConfig definitions.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, name := range []string{"crds/helmcharts.yaml", "crds/helmchartconfigs.yaml"} {
		b, err := crdFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("helm-controller: %s: %w", name, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// ensureCRDs applies the CRDs (server-side apply: no write when they are as
// given) and waits until the API server serves them.
func ensureCRDs(ctx context.Context, cfg *rest.Config) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("helm-controller: %w", err)
	}
	for _, crd := range crds {
		crd.TypeMeta = metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}
		body, err := yaml.Marshal(crd)
		if err != nil {
			return err
		}
		body, err = yaml.YAMLToJSON(body)
		if err != nil {
			return err
		}
		err = kubeclient.Retry(ctx, "apply CRD "+crd.Name, time.Minute, func(ctx context.Context) error {
			_, err := client.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, crd.Name, types.ApplyPatchType, body,
				metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true)})
			return err
		})
		if err != nil {
			return fmt.Errorf("helm-controller: %w", err)
		}
	}
	for _, crd := range crds {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // retried until the timeout
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("helm-controller: CRD %s not established: %w", crd.Name, err)
		}
	}
	return nil
}
