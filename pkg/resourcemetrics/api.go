package resourcemetrics

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/metrics/pkg/apis/metrics"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// The API's scheme: the metrics types, internal and v1beta1 (the version
// metrics-server serves, which the HPA controller and kubectl top read).
var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	utilruntime.Must(metrics.AddToScheme(scheme))
	utilruntime.Must(metricsv1beta1.AddToScheme(scheme))
	// ListOptions and the other unversioned types, as every group has.
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
}

// InstallAPI installs metrics.k8s.io/v1beta1 (nodes, pods) on the
// kube-apiserver, with listers of the API server's own Node and Pod caches.
// It implements chain.APIInstaller.
func (s *Server) InstallAPI(gs *genericapiserver.GenericAPIServer, f informers.SharedInformerFactory) error {
	nodes, pods := f.Core().V1().Nodes(), f.Core().V1().Pods()
	s.mu.Lock()
	s.nodes, s.pods = nodes.Lister(), pods.Lister()
	s.synced = []cache.InformerSynced{nodes.Informer().HasSynced, pods.Informer().HasSynced}
	s.mu.Unlock()
	info := genericapiserver.NewDefaultAPIGroupInfo(metrics.GroupName, scheme, metav1.ParameterCodec, codecs)
	info.PrioritizedVersions = []schema.GroupVersion{metricsv1beta1.SchemeGroupVersion}
	info.VersionedResourcesStorageMap[metricsv1beta1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"nodes": &nodeREST{s: s},
		"pods":  &podREST{s: s},
	}
	if err := gs.InstallAPIGroup(&info); err != nil {
		return fmt.Errorf("metrics-server: install %s: %w", metricsv1beta1.SchemeGroupVersion, err)
	}
	return nil
}

// cpuQuantity and memQuantity are a usage's figures as API quantities.
func cpuQuantity(nanocores uint64) resource.Quantity {
	return *resource.NewScaledQuantity(int64(nanocores), resource.Nano)
}

func memQuantity(b uint64) resource.Quantity {
	if b > 1<<62 {
		b = 1 << 62
	}
	return *resource.NewQuantity(int64(b), resource.BinarySI)
}

// nodeREST serves nodes.metrics.k8s.io.
type nodeREST struct{ s *Server }

var (
	_ rest.Storage              = (*nodeREST)(nil)
	_ rest.KindProvider         = (*nodeREST)(nil)
	_ rest.Scoper               = (*nodeREST)(nil)
	_ rest.Getter               = (*nodeREST)(nil)
	_ rest.Lister               = (*nodeREST)(nil)
	_ rest.SingularNameProvider = (*nodeREST)(nil)
)

func (r *nodeREST) New() runtime.Object                 { return &metrics.NodeMetrics{} }
func (r *nodeREST) NewList() runtime.Object             { return &metrics.NodeMetricsList{} }
func (r *nodeREST) Destroy()                            {}
func (r *nodeREST) Kind() string                        { return "NodeMetrics" }
func (r *nodeREST) NamespaceScoped() bool               { return false }
func (r *nodeREST) GetSingularName() string             { return "nodemetrics" }
func (r *nodeREST) groupResource() schema.GroupResource { return metrics.Resource("nodemetrics") }

// List lists the figures of the nodes the selectors pick that have them.
func (r *nodeREST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	lister, err := r.s.nodeLister()
	if err != nil {
		return nil, err
	}
	nodes, err := lister.List(labelSelector(options))
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	list := &metrics.NodeMetricsList{Items: make([]metrics.NodeMetrics, 0, len(nodes))}
	for _, node := range nodes {
		if !fieldsMatch(options, &node.ObjectMeta, false) {
			continue
		}
		if m, ok := r.metrics(node); ok {
			list.Items = append(list.Items, *m)
		}
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list, nil
}

// Get is one node's figures; NotFound when the node has none (yet).
func (r *nodeREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	lister, err := r.s.nodeLister()
	if err != nil {
		return nil, err
	}
	node, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(r.groupResource(), name)
	}
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	m, ok := r.metrics(node)
	if !ok {
		return nil, apierrors.NewNotFound(r.groupResource(), name)
	}
	return m, nil
}

func (r *nodeREST) metrics(node *corev1.Node) (*metrics.NodeMetrics, bool) {
	u, ok := r.s.store.node(node.Name)
	if !ok {
		return nil, false
	}
	return &metrics.NodeMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: node.Labels, CreationTimestamp: metav1.NewTime(time.Now())},
		Timestamp:  metav1.NewTime(u.ts),
		Window:     metav1.Duration{Duration: u.window},
		Usage:      corev1.ResourceList{corev1.ResourceCPU: cpuQuantity(u.cpu), corev1.ResourceMemory: memQuantity(u.mem)},
	}, true
}

// podREST serves pods.metrics.k8s.io.
type podREST struct{ s *Server }

var (
	_ rest.Storage              = (*podREST)(nil)
	_ rest.KindProvider         = (*podREST)(nil)
	_ rest.Scoper               = (*podREST)(nil)
	_ rest.Getter               = (*podREST)(nil)
	_ rest.Lister               = (*podREST)(nil)
	_ rest.SingularNameProvider = (*podREST)(nil)
)

func (r *podREST) New() runtime.Object                 { return &metrics.PodMetrics{} }
func (r *podREST) NewList() runtime.Object             { return &metrics.PodMetricsList{} }
func (r *podREST) Destroy()                            {}
func (r *podREST) Kind() string                        { return "PodMetrics" }
func (r *podREST) NamespaceScoped() bool               { return true }
func (r *podREST) GetSingularName() string             { return "podmetrics" }
func (r *podREST) groupResource() schema.GroupResource { return metrics.Resource("podmetrics") }

// List lists the figures of the pods the namespace and selectors pick
// that have them.
func (r *podREST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	lister, err := r.s.podLister()
	if err != nil {
		return nil, err
	}
	pods, err := lister.Pods(genericapirequest.NamespaceValue(ctx)).List(labelSelector(options))
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	list := &metrics.PodMetricsList{Items: make([]metrics.PodMetrics, 0, len(pods))}
	for _, pod := range pods {
		if !fieldsMatch(options, &pod.ObjectMeta, true) {
			continue
		}
		if m, ok := r.metrics(pod); ok {
			list.Items = append(list.Items, *m)
		}
	}
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return list, nil
}

// Get is one pod's figures; NotFound when the pod has none (yet).
func (r *podREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	lister, err := r.s.podLister()
	if err != nil {
		return nil, err
	}
	ns := genericapirequest.NamespaceValue(ctx)
	pod, err := lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(r.groupResource(), ns+"/"+name)
	}
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	m, ok := r.metrics(pod)
	if !ok {
		return nil, apierrors.NewNotFound(r.groupResource(), ns+"/"+name)
	}
	return m, nil
}

// metrics is pod's figures, its containers in the pod's order.
func (r *podREST) metrics(pod *corev1.Pod) (*metrics.PodMetrics, bool) {
	cs, earliest, ok := r.s.store.pod(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
	if !ok {
		return nil, false
	}
	order := map[string]int{}
	for i, c := range pod.Spec.InitContainers {
		order[c.Name] = i - len(pod.Spec.InitContainers) // sidecars first, as the pod starts them
	}
	for i, c := range pod.Spec.Containers {
		order[c.Name] = i
	}
	sort.Slice(cs, func(i, j int) bool {
		oi, iok := order[cs[i].name]
		oj, jok := order[cs[j].name]
		if iok != jok {
			return iok
		}
		if oi != oj {
			return oi < oj
		}
		return cs[i].name < cs[j].name
	})
	m := &metrics.PodMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, Labels: pod.Labels, CreationTimestamp: metav1.NewTime(time.Now())},
		Timestamp:  metav1.NewTime(earliest.ts),
		Window:     metav1.Duration{Duration: earliest.window},
		Containers: make([]metrics.ContainerMetrics, 0, len(cs)),
	}
	for _, c := range cs {
		m.Containers = append(m.Containers, metrics.ContainerMetrics{
			Name:  c.name,
			Usage: corev1.ResourceList{corev1.ResourceCPU: cpuQuantity(c.cpu), corev1.ResourceMemory: memQuantity(c.mem)},
		})
	}
	return m, true
}

// labelSelector is options' label selector, everything without one.
func labelSelector(options *metainternalversion.ListOptions) labels.Selector {
	if options == nil || options.LabelSelector == nil {
		return labels.Everything()
	}
	return options.LabelSelector
}

// fieldsMatch reports whether meta passes options' field selector, which
// may name metadata.name (and metadata.namespace for namespaced objects).
func fieldsMatch(options *metainternalversion.ListOptions, meta *metav1.ObjectMeta, namespaced bool) bool {
	if options == nil || options.FieldSelector == nil || options.FieldSelector.Empty() {
		return true
	}
	set := fields.Set{"metadata.name": meta.Name}
	if namespaced {
		set["metadata.namespace"] = meta.Namespace
	}
	return options.FieldSelector.Matches(set)
}
