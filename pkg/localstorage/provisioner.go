package localstorage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

// ProvisionerOptions configure the server's half.
type ProvisionerOptions struct {
	// Kubeconfig is the kubeconfig it acts with (an admin's).
	Kubeconfig string
	// Path is the directory on each node that holds the volumes'
	// directories (--default-local-storage-path).
	Path string
	// Informers, when set, is the shared informer factory it reads claims,
	// StorageClasses and volumes from (the API server's,
	// chain.Server.Informers), with its handlers removed on Stop and the
	// informers left running; else it lists and watches them with its own
	// (of the volumes, only those with its node label).
	Informers informers.SharedInformerFactory
}

// Validate reports every problem with o.
func (o ProvisionerOptions) Validate() []error {
	var errs []error
	if o.Kubeconfig == "" {
		errs = append(errs, errors.New("local-storage: no kubeconfig"))
	}
	if !filepath.IsAbs(o.Path) || filepath.Clean(o.Path) != o.Path {
		errs = append(errs, fmt.Errorf("local-storage: the storage path %q is not a clean absolute path", o.Path))
	}
	return errs
}

// Event reasons on claims and volumes, upstream's external provisioners'
// where they say the same.
const (
	reasonProvisioned    = "ProvisioningSucceeded"
	reasonProvisionError = "ProvisioningFailed"
)

// recheckDeleting is how often a volume held by its node is looked at
// again: a node removed from the cluster releases it.
const recheckDeleting = 10 * time.Minute

// key is one work item: a claim (namespace and name) or a volume (name).
type key struct {
	volume          bool
	namespace, name string
}

// Provisioner is the server's half (see the package comment). It is a
// component: Start starts the informers and the worker, Ready waits for
// the informers' first lists, Stop ends both.
type Provisioner struct {
	o ProvisionerOptions

	mu       sync.Mutex
	cancel   context.CancelFunc
	done     chan struct{}
	synced   []cache.InformerSynced
	stopped  bool
	client   kubernetes.Interface
	claims   corelisters.PersistentVolumeClaimLister
	volumes  corelisters.PersistentVolumeLister
	classes  storagelisters.StorageClassLister
	queue    workqueue.TypedRateLimitingInterface[key]
	recorder record.EventRecorder
}

// NewProvisioner validates o.
func NewProvisioner(o ProvisionerOptions) (*Provisioner, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Provisioner{o: o}, nil
}

// Name is the component's name.
func (p *Provisioner) Name() string { return ComponentName }

// Start starts the informers and the worker.
func (p *Provisioner) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil || p.stopped {
		return nil
	}
	client, err := kubeclient.New(p.o.Kubeconfig, ComponentName, kubeclient.Steady)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithName(ComponentName)
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	factory, own := p.o.Informers, false
	if factory == nil {
		factory, own = informers.NewSharedInformerFactory(client, 0), true
	}
	claimInf, classInf := factory.Core().V1().PersistentVolumeClaims(), factory.Storage().V1().StorageClasses()
	// The API server's informer has every volume (its Node authorizer's);
	// one of its own lists only this provisioner's, by their node label.
	// Either way the handler and the sync act on its own only (ours).
	var volInf cache.SharedIndexInformer
	if own {
		volInf = coreinformers.NewFilteredPersistentVolumeInformer(client, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = NodeLabel })
	} else {
		volInf = factory.Core().V1().PersistentVolumes().Informer()
	}
	p.client, p.claims, p.classes = client, claimInf.Lister(), classInf.Lister()
	p.volumes = corelisters.NewPersistentVolumeLister(volInf.GetIndexer())
	p.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: ComponentName})
	broadcaster := record.NewBroadcaster(record.WithContext(runCtx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	p.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "edgeplane-" + ComponentName})

	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{claimInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    p.enqueueClaim,
			UpdateFunc: func(_, obj any) { p.enqueueClaim(obj) },
		}},
		{volInf, cache.ResourceEventHandlerFuncs{
			AddFunc:    p.enqueueVolume,
			UpdateFunc: func(_, obj any) { p.enqueueVolume(obj) },
		}},
		// A class made after its claims (the manifests directory applies
		// it late): look at the claims again.
		{classInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { p.enqueueAllClaims(logger) },
		}},
	}
	// No resync, whatever the factory's (component.Handlers).
	var registered component.Handlers
	for _, h := range handlers {
		if err := registered.Add(h.inf, h.h); err != nil {
			registered.Remove(logger)
			cancel()
			broadcaster.Shutdown()
			return fmt.Errorf("%s: %w", ComponentName, err)
		}
	}
	p.synced = registered.Synced()
	factory.Start(runCtx.Done())
	if own {
		go volInf.Run(runCtx.Done())
	}
	done := make(chan struct{})
	p.cancel, p.done = cancel, done
	go func() {
		defer close(done)
		defer broadcaster.Shutdown()
		if own {
			defer factory.Shutdown()
		}
		defer registered.Remove(logger)
		defer p.queue.ShutDown()
		if !cache.WaitForCacheSync(runCtx.Done(), p.synced...) {
			return
		}
		go func() { <-runCtx.Done(); p.queue.ShutDown() }()
		for p.processNext(runCtx) {
		}
	}()
	return nil
}

// Ready waits for the informers' first lists.
func (p *Provisioner) Ready(ctx context.Context) error {
	p.mu.Lock()
	synced := p.synced
	p.mu.Unlock()
	return component.WaitSynced(ctx, "local-storage", synced)
}

// Stop stops the worker and the informers.
func (p *Provisioner) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	return component.StopWorker(ctx, cancel, done)
}

func (p *Provisioner) enqueueClaim(obj any) {
	if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && pvc.Spec.VolumeName == "" {
		p.queue.Add(key{namespace: pvc.Namespace, name: pvc.Name})
	}
}

func (p *Provisioner) enqueueVolume(obj any) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok && ours(pv) {
		p.queue.Add(key{volume: true, name: pv.Name})
	}
}

func (p *Provisioner) enqueueAllClaims(logger klog.Logger) {
	pvcs, err := p.claims.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Listing PersistentVolumeClaims")
		return
	}
	for _, pvc := range pvcs {
		p.enqueueClaim(pvc)
	}
}

func (p *Provisioner) processNext(ctx context.Context) bool {
	k, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(k)
	var err error
	if k.volume {
		err = p.syncVolume(ctx, k.name)
	} else {
		err = p.syncClaim(ctx, k.namespace, k.name)
	}
	if err == nil {
		p.queue.Forget(k)
		return true
	}
	if kubeclient.Transient(err) {
		klog.FromContext(ctx).V(2).Info("Retrying", "key", k, "err", err.Error())
	} else {
		utilruntime.HandleErrorWithContext(ctx, err, "Local storage", "key", k)
	}
	p.queue.AddRateLimited(k)
	return true
}

// syncClaim gives a claim of the class, placed on a node, its volume.
func (p *Provisioner) syncClaim(ctx context.Context, namespace, name string) error {
	pvc, err := p.claims.PersistentVolumeClaims(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil || pvc.Spec.StorageClassName == nil {
		return nil
	}
	class, err := p.classes.Get(*pvc.Spec.StorageClassName)
	if err != nil || class.Provisioner != ProvisionerName {
		return nil // another provisioner's, or a class still to come (its Add looks again)
	}
	nodeName := pvc.Annotations[annSelectedNode]
	if nodeName == "" {
		if class.VolumeBindingMode == nil || *class.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			p.recorder.Eventf(pvc, corev1.EventTypeWarning, reasonProvisionError,
				"StorageClass %s binds Immediately, and a local-path volume must wait for its pod's node: use volumeBindingMode WaitForFirstConsumer", class.Name)
		}
		return nil // the scheduler places the first pod that uses it
	}
	volume := VolumeName(string(pvc.UID))
	if _, err := p.volumes.Get(volume); err == nil {
		return nil // made; binding it is the volume controller's
	}
	if err := checkClaim(pvc); err != nil {
		p.recorder.Eventf(pvc, corev1.EventTypeWarning, reasonProvisionError, "local-path: %v", err)
		return nil // the claim itself has to change
	}
	node, err := p.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		p.recorder.Eventf(pvc, corev1.EventTypeWarning, reasonProvisionError, "local-path: the selected node %s is not in the cluster", nodeName)
		return nil
	} else if err != nil {
		return err
	}
	pv := newVolume(pvc, class, node, p.o.Path)
	if _, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{FieldManager: fieldManager}); apierrors.IsAlreadyExists(err) {
		return nil // another server's, or ours before a restart
	} else if err != nil {
		return fmt.Errorf("creating PersistentVolume %s for claim %s/%s: %w", volume, namespace, name, err)
	}
	klog.FromContext(ctx).V(2).Info("Provisioned a volume", "claim", klog.KObj(pvc), "volume", volume, "node", nodeName, "path", pv.Spec.Local.Path)
	p.recorder.Eventf(pvc, corev1.EventTypeNormal, reasonProvisioned, "Successfully provisioned volume %s on node %s at %s", volume, nodeName, pv.Spec.Local.Path)
	return nil
}

// syncVolume deletes a Released volume of reclaim Delete (its node then
// removes the directory and the finalizer), and lets go of a volume whose
// node left the cluster.
func (p *Provisioner) syncVolume(ctx context.Context, name string) error {
	pv, err := p.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if !ours(pv) {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("volume", pv.Name, "node", pv.Labels[NodeLabel])
	if pv.DeletionTimestamp != nil {
		if !slices.Contains(pv.Finalizers, Finalizer) {
			return nil
		}
		_, err := p.client.CoreV1().Nodes().Get(ctx, pv.Labels[NodeLabel], metav1.GetOptions{})
		if err == nil {
			p.queue.AddAfter(key{volume: true, name: name}, recheckDeleting) // the node removes it
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		logger.Info("The volume's node is not in the cluster: its directory there is left, and the volume is let go", "path", pathOf(pv))
		finalizers := slices.DeleteFunc(slices.Clone(pv.Finalizers), func(f string) bool { return f == Finalizer })
		if err := patchFinalizers(ctx, p.client, pv, finalizers); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
		}
		return nil
	}
	if pv.Status.Phase != corev1.VolumeReleased || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return nil
	}
	err = p.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting the released PersistentVolume %s: %w", pv.Name, err)
	}
	logger.V(2).Info("Deleted a released volume: its node removes the directory", "path", pathOf(pv))
	return nil
}

func pathOf(pv *corev1.PersistentVolume) string {
	if pv.Spec.Local != nil {
		return pv.Spec.Local.Path
	}
	return ""
}
