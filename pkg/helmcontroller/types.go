package helmcontroller

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The API of k3s's helm-controller, helm.cattle.io/v1, so that k3s users'
// HelmChart and HelmChartConfig files apply unchanged.
const (
	Group      = "helm.cattle.io"
	Version    = "v1"
	apiVersion = Group + "/" + Version
)

var (
	// HelmChartResource is the helmcharts resource.
	HelmChartResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "helmcharts"}
	// HelmChartConfigResource is the helmchartconfigs resource.
	HelmChartConfigResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "helmchartconfigs"}
)

// Names k3s's helm-controller uses that a k3s user's objects may carry.
const (
	// AnnotationUnmanaged on a HelmChart keeps every helm-controller away.
	AnnotationUnmanaged = "helmcharts.helm.cattle.io/unmanaged"
	// AnnotationManagedBy names the controller a HelmChart belongs to; a
	// HelmChart naming another than ManagedBy is left alone.
	AnnotationManagedBy = "helmcharts.cattle.io/managed-by"
	// ManagedBy is k3s's (and this controller's) name in AnnotationManagedBy.
	ManagedBy = "helm-controller"
	// LabelConfigHash on a release (its Secret or ConfigMap) is the hash of
	// the configuration it was installed or upgraded with.
	LabelConfigHash = "helmcharts.helm.cattle.io/configHash"
)

// Finalizer is set on every HelmChart this controller installed, so that its
// release is uninstalled before the object goes.
const Finalizer = "edgeplane.io/helm-controller"

// FailurePolicy is spec.failurePolicy.
type FailurePolicy string

// The failure policies of k3s's helm-controller.
const (
	FailurePolicyAbort     FailurePolicy = "abort"
	FailurePolicyReinstall FailurePolicy = "reinstall"
	FailurePolicyRetry     FailurePolicy = "retry"
)

// HelmChart is a helm.cattle.io/v1 HelmChart.
type HelmChart struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              HelmChartSpec   `json:"spec,omitempty"`
	Status            HelmChartStatus `json:"status,omitempty"`
}

// HelmChartSpec holds the fields of k3s's HelmChartSpec. Fields for the
// install Job (jobImage, backOffLimit, podSecurityContext, securityContext)
// are accepted and reported as not used: charts are installed in process.
type HelmChartSpec struct {
	TargetNamespace       string                        `json:"targetNamespace,omitempty"`
	CreateNamespace       bool                          `json:"createNamespace,omitempty"`
	Chart                 string                        `json:"chart,omitempty"`
	Version               string                        `json:"version,omitempty"`
	Repo                  string                        `json:"repo,omitempty"`
	RepoCA                string                        `json:"repoCA,omitempty"`
	RepoCAConfigMap       *corev1.LocalObjectReference  `json:"repoCAConfigMap,omitempty"`
	Set                   map[string]intstr.IntOrString `json:"set,omitempty"`
	Values                json.RawMessage               `json:"values,omitempty"`
	ValuesContent         string                        `json:"valuesContent,omitempty"`
	ValuesSecrets         []SecretSpec                  `json:"valuesSecrets,omitempty"`
	HelmVersion           string                        `json:"helmVersion,omitempty"`
	Bootstrap             bool                          `json:"bootstrap,omitempty"`
	TakeOwnership         bool                          `json:"takeOwnership,omitempty"`
	ServerSide            string                        `json:"serverSide,omitempty"`
	ForceConflicts        bool                          `json:"forceConflicts,omitempty"`
	ChartContent          string                        `json:"chartContent,omitempty"`
	JobImage              string                        `json:"jobImage,omitempty"`
	BackOffLimit          *int32                        `json:"backOffLimit,omitempty"`
	Timeout               *metav1.Duration              `json:"timeout,omitempty"`
	FailurePolicy         FailurePolicy                 `json:"failurePolicy,omitempty"`
	AuthSecret            *corev1.LocalObjectReference  `json:"authSecret,omitempty"`
	AuthPassCredentials   bool                          `json:"authPassCredentials,omitempty"`
	InsecureSkipTLSVerify bool                          `json:"insecureSkipTLSVerify,omitempty"`
	PlainHTTP             bool                          `json:"plainHTTP,omitempty"`
	DockerRegistrySecret  *corev1.LocalObjectReference  `json:"dockerRegistrySecret,omitempty"`
	PodSecurityContext    json.RawMessage               `json:"podSecurityContext,omitempty"`
	SecurityContext       json.RawMessage               `json:"securityContext,omitempty"`
	Driver                string                        `json:"driver,omitempty"`
}

// SecretSpec names keys of a Secret in the chart's namespace that hold
// values files.
type SecretSpec struct {
	Name          string   `json:"name,omitempty"`
	Keys          []string `json:"keys,omitempty"`
	IgnoreUpdates bool     `json:"ignoreUpdates,omitempty"`
}

// HelmChartStatus is what the controller reports. JobName stays empty (there
// is no Job); the conditions are Failed (k3s's) and Deployed.
type HelmChartStatus struct {
	JobName    string      `json:"jobName,omitempty"`
	Conditions []Condition `json:"conditions,omitempty"`
}

// Condition is one status condition.
type Condition struct {
	Type    string                 `json:"type"`
	Status  corev1.ConditionStatus `json:"status"`
	Reason  string                 `json:"reason,omitempty"`
	Message string                 `json:"message,omitempty"`
}

// The condition types.
const (
	// ConditionFailed is True when the last install, upgrade or uninstall
	// failed (k3s's condition), False when it succeeded.
	ConditionFailed = "Failed"
	// ConditionDeployed is True when the release is deployed with the
	// chart's current configuration.
	ConditionDeployed = "Deployed"
)

// HelmChartConfig is a helm.cattle.io/v1 HelmChartConfig: values and
// policies for the HelmChart of the same namespace and name, merged over its
// own (k3s users change packaged charts this way).
type HelmChartConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              HelmChartConfigSpec `json:"spec,omitempty"`
}

// HelmChartConfigSpec holds the fields of k3s's HelmChartConfigSpec.
type HelmChartConfigSpec struct {
	Values         json.RawMessage `json:"values,omitempty"`
	ValuesContent  string          `json:"valuesContent,omitempty"`
	ValuesSecrets  []SecretSpec    `json:"valuesSecrets,omitempty"`
	FailurePolicy  FailurePolicy   `json:"failurePolicy,omitempty"`
	ServerSide     string          `json:"serverSide,omitempty"`
	ForceConflicts *bool           `json:"forceConflicts,omitempty"`
}

// fromUnstructured converts an object of the informers into out.
func fromUnstructured(obj any, out any) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("unexpected object %T", obj)
	}
	b, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}
