package localstorage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

// Event reasons of a node's part.
const (
	// ReasonPathNotWritable: the node cannot make or write the volume's
	// directory (on the claim).
	ReasonPathNotWritable = "LocalPathNotWritable"
	// ReasonDiskFull: the disk holding the volume's directory has less
	// room than the claim asks for (on the claim).
	ReasonDiskFull = "LocalPathDiskFull"
	// ReasonRemoveFailed: the node cannot remove the directory of a
	// deleted volume (on the volume).
	ReasonRemoveFailed = "LocalPathRemoveFailed"
)

// pvProtectionFinalizer holds a volume while it is bound to a claim
// (upstream's PV protection).
const pvProtectionFinalizer = "kubernetes.io/pv-protection"

// Node is a node's half (see the package comment), a node component: it
// works in the background, Ready waits for the first list of the node's
// volumes, and it ends (Done, Err) only when it cannot run at all. Stop
// leaves every directory in place.
type Node struct {
	// NodeName is the Node's name.
	NodeName string
	// Kubeconfig holds the node's credentials.
	Kubeconfig string
	// Path is the cluster's storage path (for the log; each volume names
	// its own directory).
	Path string

	loop background.Loop
	component.Status

	// checked are the volumes whose directory was checked since the
	// start, by UID: a volume's disk is reported once, not at every
	// update of the volume.
	mu      sync.Mutex
	checked map[types.UID]bool
}

// Name implements component.Component.
func (n *Node) Name() string { return ComponentName }

// Start starts the part in the background.
func (n *Node) Start(ctx context.Context) error {
	if n.NodeName == "" || n.Kubeconfig == "" {
		return errors.New("local-storage: a node name and a kubeconfig are required")
	}
	logger := klog.FromContext(ctx).WithName(ComponentName)
	n.loop.Start(klog.NewContext(ctx, logger), n.run)
	return nil
}

// Ready waits for the first list of the node's volumes.
func (n *Node) Ready(ctx context.Context) error { return n.WaitReady(ctx) }

// Stop ends the part.
func (n *Node) Stop(ctx context.Context) error { return n.loop.Stop(ctx) }

// nodeWorker is the running part.
type nodeWorker struct {
	*Node
	client   kubernetes.Interface
	volumes  corelisters.PersistentVolumeLister
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
}

func (n *Node) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	client, err := kubeclient.New(n.Kubeconfig, ComponentName, kubeclient.Steady)
	if err != nil {
		n.End(fmt.Errorf("local volumes are not served on this node: %w", err))
		return
	}
	selector := labels.SelectorFromSet(labels.Set{NodeLabel: n.NodeName}).String()
	inf := coreinformers.NewFilteredPersistentVolumeInformer(client, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = selector })
	w := &nodeWorker{
		Node:    n,
		client:  client,
		volumes: corelisters.NewPersistentVolumeLister(inf.GetIndexer()),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(nodeRetries(),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: ComponentName}),
	}
	n.mu.Lock()
	n.checked = map[types.UID]bool{}
	n.mu.Unlock()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	w.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "edgeplane-" + ComponentName, Host: n.NodeName})
	enqueue := func(obj any) {
		if pv, ok := obj.(*corev1.PersistentVolume); ok {
			w.queue.Add(pv.Name)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		n.End(fmt.Errorf("local volumes are not served on this node: %w", err))
		return
	}
	defer w.queue.ShutDown()
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return // stopped
	}
	logger.V(1).Info("Serving local volumes", "path", n.Path)
	n.MarkReady()
	go func() { <-ctx.Done(); w.queue.ShutDown() }()
	for w.processNext(ctx) {
	}
}

// nodeRetries spaces a volume's retries: from 100 ms, doubling up to
// retryMax, so that a disk or path an operator fixes (a remount, a full
// disk cleared) is picked up within retryMax, where upstream's default
// controller limiter would have grown to 16 minutes. A failure is an
// event on the claim each time: at most one every retryMax.
func nodeRetries() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, retryMax)
}

// retryMax is the longest wait between a failing volume's retries.
const retryMax = 30 * time.Second

func (w *nodeWorker) processNext(ctx context.Context) bool {
	name, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(name)
	if err := w.sync(ctx, name); err != nil {
		if !kubeclient.Transient(err) {
			utilruntime.HandleErrorWithContext(ctx, err, "Local volume", "volume", name)
		}
		w.queue.AddRateLimited(name)
		return true
	}
	w.queue.Forget(name)
	return true
}

// sync makes the directory of one of the node's volumes, or removes it
// when the volume is being deleted.
func (w *nodeWorker) sync(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx).WithValues("volume", name)
	pv, err := w.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if !ours(pv) || pv.Labels[NodeLabel] != w.NodeName {
		return nil
	}
	dir, ok := volumeDir(pv)
	if !ok {
		logger.Info("The volume's path is not the directory edgeplane gave it: the node leaves it alone", "path", pathOf(pv))
		return nil
	}
	if pv.DeletionTimestamp != nil {
		return w.remove(ctx, pv, dir)
	}
	claim := claimRef(pv)
	if err := ensureDir(dir); err != nil {
		reason := ReasonPathNotWritable
		if noSpace(err) {
			reason = ReasonDiskFull
		}
		w.recorder.Eventf(claim, corev1.EventTypeWarning, reason,
			"Node %s cannot make the volume's directory: %v; pods using the claim cannot start until it can (fix the disk, or the server's --default-local-storage-path)", w.NodeName, err)
		return err
	}
	w.mu.Lock()
	seen := w.checked[pv.UID]
	w.checked[pv.UID] = true
	w.mu.Unlock()
	if seen {
		return nil
	}
	if err := writable(dir); err != nil {
		w.recorder.Eventf(claim, corev1.EventTypeWarning, ReasonPathNotWritable,
			"Node %s cannot write the volume's directory: %v; writes to the volume fail until it can", w.NodeName, err)
		return nil
	}
	free, err := freeBytes(dir)
	if err != nil {
		logger.Error(err, "Reading the free space of the volume's disk")
		return nil
	}
	if msg := spaceShortage(dir, free, pv.Spec.Capacity[corev1.ResourceStorage]); msg != "" {
		w.recorder.Eventf(claim, corev1.EventTypeWarning, ReasonDiskFull, "Node %s: %s", w.NodeName, msg)
	}
	return nil
}

// remove removes the directory of a volume being deleted, then the
// finalizer that held the volume for it.
func (w *nodeWorker) remove(ctx context.Context, pv *corev1.PersistentVolume, dir string) error {
	if !slices.Contains(pv.Finalizers, Finalizer) {
		return nil
	}
	if slices.Contains(pv.Finalizers, pvProtectionFinalizer) {
		// Deleted while a claim still holds it (a pod may be writing):
		// the volume controller lets go once it is unbound.
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		w.recorder.Eventf(pv, corev1.EventTypeWarning, ReasonRemoveFailed,
			"Node %s cannot remove the directory of the deleted volume: %v; the volume stays until it can", w.NodeName, err)
		return err
	}
	finalizers := slices.DeleteFunc(slices.Clone(pv.Finalizers), func(f string) bool { return f == Finalizer })
	if err := patchFinalizers(ctx, w.client, pv, finalizers); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
	}
	w.mu.Lock()
	delete(w.checked, pv.UID)
	w.mu.Unlock()
	klog.FromContext(ctx).V(1).Info("Removed the directory of a deleted volume", "volume", pv.Name, "path", dir)
	return nil
}

// claimRef is the reference of pv's claim, for its events.
func claimRef(pv *corev1.PersistentVolume) *corev1.ObjectReference {
	ref := *pv.Spec.ClaimRef
	if ref.Kind == "" {
		ref.Kind, ref.APIVersion = "PersistentVolumeClaim", "v1"
	}
	return &ref
}
