package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/controller"
	"k8s.io/kubernetes/pkg/controller/tainteviction"
)

// AutonomousLabel marks a node meant to work offline: with the value "true",
// a partition does not evict its pods. The node lifecycle controller still
// marks it NotReady and taints it node.kubernetes.io/unreachable (or
// not-ready) NoSchedule and NoExecute, so nothing new is scheduled on it, but
// the taint-eviction controller does not see the two NoExecute taints and
// deletes none of its pods. A kubelet may set it on its own Node
// (--node-label edgeplane.io/autonomous=true at join): NodeRestriction
// admission restricts only labels under kubernetes.io/ and k8s.io/
// (docs/NODES.md, "Autonomous nodes").
const AutonomousLabel = "edgeplane.io/autonomous"

// Autonomous reports whether node opted out of eviction on a partition.
func Autonomous(node *corev1.Node) bool {
	return node.Labels[AutonomousLabel] == "true"
}

// evictionControllers are upstream's controllers that edgeplane turns off in
// the controller-manager and runs itself (runTaintEviction).
var evictionControllers = []string{names.TaintEvictionController}

// partitionTaints are the NoExecute taints the node lifecycle controller
// puts on a node that stopped reporting (unreachable) or reports NotReady
// (not-ready). Every other NoExecute taint, node.kubernetes.io/out-of-service
// and an administrator's own among them, still evicts from an autonomous node.
var partitionTaints = map[string]bool{
	corev1.TaintNodeUnreachable: true,
	corev1.TaintNodeNotReady:    true,
}

// taintEvictionInformerAgent ends the User-Agent of its informers' client.
const taintEvictionInformerAgent = "/taint-eviction-informers"

// runTaintEviction runs upstream's taint-eviction controller, under its own
// name, events and metrics, until ctx ends, on a Node informer that does not
// show the partition taints of autonomous nodes (hidePartitionTaints). Its
// informers use the controller-manager's identity (kubeconfig), as upstream's
// shared informers do; it deletes pods with the node-controller service
// account's token and RBAC role, as upstream's does (core: the client that
// requests that token). Its informers keep only what the controller reads:
// of bound pods their name, node and tolerations (trimPod), of nodes their
// name and taints (hidePartitionTaints).
func runTaintEviction(ctx context.Context, kubeconfig *rest.Config, core typedcorev1.CoreV1Interface) error {
	// Named as upstream names each controller's logger.
	ctx = klog.NewContext(ctx, klog.LoggerWithName(klog.FromContext(ctx), names.TaintEvictionController))
	cfg := rest.CopyConfig(kubeconfig)
	cfg.UserAgent = rest.DefaultKubernetesUserAgent() + taintEvictionInformerAgent
	informerClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("controller-manager: taint-eviction informer client: %w", err)
	}
	builder := clientbuilder.NewDynamicClientBuilder(rest.AnonymousClientConfig(kubeconfig), core, metav1.NamespaceSystem)
	// Upstream's taint-eviction-controller uses node-controller's account.
	client, err := builder.Client("node-controller")
	if err != nil {
		return fmt.Errorf("controller-manager: %s client: %w", names.TaintEvictionController, err)
	}

	pods := informers.NewSharedInformerFactoryWithOptions(informerClient, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}),
		informers.WithTransform(trimPod))
	nodes := informers.NewSharedInformerFactoryWithOptions(informerClient, 0, informers.WithTransform(hidePartitionTaints))
	podInformer := pods.Core().V1().Pods()
	// The controller finds a node's pods through this index, which upstream's
	// shared Pod informer gets from the node lifecycle controller.
	if err := controller.AddPodNodeNameIndexer(podInformer.Informer()); err != nil {
		return fmt.Errorf("controller-manager: %s: %w", names.TaintEvictionController, err)
	}
	tec, err := tainteviction.New(ctx, client, podInformer, nodes.Core().V1().Nodes(), names.TaintEvictionController)
	if err != nil {
		return fmt.Errorf("controller-manager: %s: %w", names.TaintEvictionController, err)
	}
	pods.StartWithContext(ctx)
	nodes.StartWithContext(ctx)
	tec.Run(ctx)
	pods.Shutdown()
	nodes.Shutdown()
	return nil
}

// hidePartitionTaints is the Node informer's transform: an autonomous node's
// partition taints are dropped, so the taint-eviction controller never starts
// (or cancels) the eviction of its pods. When the label is removed while
// the node is tainted, the controller sees the taints appear and evicts as
// upstream would for a taint added at that moment: each pod after its
// tolerationSeconds, counted from then. Of each Node it keeps only what the
// controller reads: its name and taints.
func hidePartitionTaints(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	var taints []corev1.Taint
	for _, t := range node.Spec.Taints {
		if Autonomous(node) && t.Effect == corev1.TaintEffectNoExecute && partitionTaints[t.Key] {
			continue
		}
		taints = append(taints, t)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion},
		Spec:       corev1.NodeSpec{Taints: taints},
	}, nil
}

// trimPod is the Pod informer's transform: it keeps what the taint-eviction
// controller reads from its cache (name, namespace, node, tolerations; it
// reads a pod afresh from the API server before deleting it), so the second
// copy of the cluster's bound pods costs a fraction of the first.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{NodeName: pod.Spec.NodeName, Tolerations: pod.Spec.Tolerations},
	}, nil
}
