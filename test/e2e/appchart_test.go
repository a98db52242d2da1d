package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/edgeplane/edgeplane/internal/testing/testchart"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// appChartFiles is a chart as edge charts are: a web server whose content
// lives on a PersistentVolumeClaim with no storageClassName, its Service,
// an Ingress with no class for a host, and an HPA on CPU. Nothing in it
// names anything edgeplane-specific: it runs on a cluster made with no
// flags, or it does not run at all.
func appChartFiles() map[string]string {
	return map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: webapp\nversion: 0.1.0\n",
		"values.yaml": "greeting: hello\nhost: app.example\n",
		"templates/pvc.yaml": `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {{ .Release.Name }}-data
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
`,
		"templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: 1
  selector: {matchLabels: {app: {{ .Release.Name }}}}
  template:
    metadata: {labels: {app: {{ .Release.Name }}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: ` + testimage.DefaultBusyboxName + `
        command: [sh, -c, 'echo {{ .Values.greeting }} > /data/index.html && exec httpd -f -p 8080 -h /data']
        ports: [{containerPort: 8080}]
        resources: {requests: {cpu: 10m, memory: 8Mi}}
        volumeMounts: [{name: data, mountPath: /data}]
      volumes:
      - name: data
        persistentVolumeClaim: {claimName: {{ .Release.Name }}-data}
`,
		"templates/service.yaml": `apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}
spec:
  selector: {app: {{ .Release.Name }}}
  ports: [{port: 80, targetPort: 8080}]
`,
		"templates/ingress.yaml": `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {{ .Release.Name }}
spec:
  rules:
  - host: {{ .Values.host }}
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: {{ .Release.Name }}, port: {number: 80}}}}
`,
		"templates/hpa.yaml": `apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ .Release.Name }}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: {{ .Release.Name }}}
  minReplicas: 1
  maxReplicas: 2
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}
`,
	}
}

// checkApplicationChart installs appChartFiles as a k3s user's HelmChart
// (chartContent, airgap) on a cluster made with no flags, and checks what
// the user would: the release deployed, its claim bound to a local volume
// by the default StorageClass, the page written to that volume served by
// the Ingress on port 80 of both nodes from outside the cluster network,
// and the HPA reading the pods' CPU from the Metrics API.
func checkApplicationChart(t *testing.T, c *twoNodeCluster) {
	s := c.Server
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(s.config)
	charts := schema.GroupVersionResource{Group: "helm.cattle.io", Version: "v1", Resource: "helmcharts"}
	content := testchart.Files(t, "webapp", appChartFiles())
	chart := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
		"metadata": map[string]any{"name": "webapp", "namespace": "kube-system"},
		"spec": map[string]any{
			"chartContent":    base64.StdEncoding.EncodeToString(content),
			"targetNamespace": "webapp",
			"createNamespace": true,
			"valuesContent":   "greeting: from-the-volume\n",
		},
	}}
	if _, err := dyn.Resource(charts).Namespace("kube-system").Create(ctx, chart, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(charts).Namespace("kube-system").Delete(context.Background(), "webapp", metav1.DeleteOptions{})
	})

	eventually(t, 2*time.Minute, "the HelmChart webapp deployed", func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(charts).Namespace("kube-system").Get(ctx, "webapp", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Deployed" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, fmt.Errorf("conditions %v", conds)
	})

	eventually(t, 3*time.Minute, "webapp's pod running", func(ctx context.Context) (bool, error) {
		pods, err := s.client.CoreV1().Pods("webapp").List(ctx, metav1.ListOptions{LabelSelector: "app=webapp"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				return true, nil
			}
		}
		return false, fmt.Errorf("%d pods: %s", len(pods.Items), podPhases(pods.Items))
	})

	pvc, err := s.client.CoreV1().PersistentVolumeClaims("webapp").Get(ctx, "webapp-data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "local-path" {
		t.Errorf("claim webapp-data: phase %s, class %v: want Bound by the default class local-path", pvc.Status.Phase, pvc.Spec.StorageClassName)
	}
	pv, err := s.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.Local == nil && pv.Spec.HostPath == nil {
		t.Errorf("volume %s is not a volume on the node: %+v", pv.Name, pv.Spec.PersistentVolumeSource)
	}

	// The page the pod wrote to its volume, through the Ingress, from the
	// host (outside the cluster network), on each node's port 80.
	for _, ip := range []string{c.ServerIP, c.AgentIP} {
		url := "http://" + ip + "/index.html"
		eventually(t, 2*time.Minute, "app.example at "+url, func(ctx context.Context) (bool, error) {
			code, body, err := hostRequest(ctx, nil, url, "app.example")
			if err != nil {
				return false, err
			}
			return code == 200 && body == "from-the-volume", fmt.Errorf("%d %q", code, body)
		})
	}

	// The HPA reads the pods' CPU from the Metrics API: a figure, and
	// the condition that says it can compute a scale.
	eventually(t, 3*time.Minute, "the HPA webapp with a CPU figure", func(ctx context.Context) (bool, error) {
		h, err := s.client.AutoscalingV2().HorizontalPodAutoscalers("webapp").Get(ctx, "webapp", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var active, figure bool
		for _, cond := range h.Status.Conditions {
			if cond.Type == "ScalingActive" && cond.Status == corev1.ConditionTrue {
				active = true
			}
		}
		for _, m := range h.Status.CurrentMetrics {
			if m.Resource != nil && m.Resource.Name == corev1.ResourceCPU && m.Resource.Current.AverageUtilization != nil {
				figure = true
			}
		}
		return active && figure, fmt.Errorf("status %s", hpaStatus(h))
	})
}

// podPhases is pods' names and phases, for failure messages.
func podPhases(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "%s=%s ", p.Name, p.Status.Phase)
	}
	return b.String()
}
