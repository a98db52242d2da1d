package resourcemetrics

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/metrics/pkg/apis/metrics"
)

// The table `kubectl get nodes.metrics.k8s.io` (and pods) prints: the
// name, the CPU and memory (a pod's summed over its containers) and the
// window, metrics-server's columns.
var tableColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the resource"},
	{Name: "cpu", Type: "string", Format: "quantity", Description: "CPU usage"},
	{Name: "memory", Type: "string", Format: "quantity", Description: "Memory working set"},
	{Name: "Window", Type: "string", Format: "duration", Description: "The window the CPU usage is over"},
}

var (
	_ rest.TableConvertor = (*nodeREST)(nil)
	_ rest.TableConvertor = (*podREST)(nil)
)

func (r *nodeREST) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	return toTable(obj)
}

func (r *podREST) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	return toTable(obj)
}

func toTable(obj runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: tableColumns}
	if l, err := meta.ListAccessor(obj); err == nil {
		t.ResourceVersion, t.Continue = l.GetResourceVersion(), l.GetContinue()
	}
	row := func(o runtime.Object, name string, u corev1.ResourceList, window metav1.Duration) {
		cpu, mem := u[corev1.ResourceCPU], u[corev1.ResourceMemory]
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells:  []any{name, cpu.String(), mem.String(), window.Duration.String()},
			Object: runtime.RawExtension{Object: o},
		})
	}
	podRow := func(p *metrics.PodMetrics) {
		sum := corev1.ResourceList{}
		for _, c := range p.Containers {
			for k, v := range c.Usage {
				q := sum[k]
				q.Add(v)
				sum[k] = q
			}
		}
		row(p, p.Name, sum, p.Window)
	}
	switch o := obj.(type) {
	case *metrics.NodeMetrics:
		row(o, o.Name, o.Usage, o.Window)
	case *metrics.NodeMetricsList:
		for i := range o.Items {
			row(&o.Items[i], o.Items[i].Name, o.Items[i].Usage, o.Items[i].Window)
		}
	case *metrics.PodMetrics:
		podRow(o)
	case *metrics.PodMetricsList:
		for i := range o.Items {
			podRow(&o.Items[i])
		}
	}
	return t, nil
}
