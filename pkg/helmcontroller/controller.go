// Package helmcontroller installs Helm charts from HelmChart objects, as
// k3s's helm-controller does, with the same API (helm.cattle.io/v1
// HelmChart and HelmChartConfig), so that a k3s user's HelmChart files work
// unchanged, also from <data-dir>/manifests. Unlike k3s it runs Helm's Go
// library in the server's process: no install Job, no klipper-helm image.
//
// A HelmChart installs its chart as the release named after it, in
// spec.targetNamespace (default: the HelmChart's namespace). The chart comes
// from spec.chartContent (a base64 .tgz, for hosts without a registry),
// spec.repo with spec.chart and spec.version, an oci:// reference, or the
// URL of an archive. Values are merged as k3s merges them: spec.valuesContent,
// spec.values, spec.valuesSecrets, then those of the HelmChartConfig of the
// same namespace and name, then spec.set.
//
// The release carries the hash of that configuration (label
// helmcharts.helm.cattle.io/configHash, as k3s's): when the HelmChart or its
// HelmChartConfig changes the hash, the release is upgraded; when the hash
// is the one deployed, nothing is written. A deleted HelmChart is
// uninstalled first (finalizer edgeplane.io/helm-controller). Each outcome
// is an event on the HelmChart and its Failed and Deployed conditions.
//
//	Start: apply the CRDs, start the informers and the worker.
//	Ready: nil once the CRDs are served and the informers have synced.
//	Stop:  stop the worker and the informers; idempotent.
package helmcontroller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

// ComponentName is the component's name and its --disable name (k3s's
// --disable-helm-controller).
const ComponentName = "helm-controller"

// DefaultResync is how often every HelmChart is checked again though
// nothing changed: a changed Secret of spec.valuesSecrets is noticed then.
const DefaultResync = 10 * time.Minute

// Options configure the controller.
type Options struct {
	// Kubeconfig is an admin kubeconfig: charts create any kind of object.
	Kubeconfig string
	// Resync is the period of checks without a change; 0 means DefaultResync.
	Resync time.Duration
	// RetryBase and RetryMax bound the back-off of a failed chart; 0 means
	// 2 s and 5 min.
	RetryBase, RetryMax time.Duration
}

// Controller installs, upgrades and uninstalls the HelmCharts' releases.
type Controller struct {
	o Options

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	ready   chan struct{}
	failed  error
	stopped bool

	cfg         *rest.Config
	client      kubernetes.Interface
	dyn         dynamic.Interface
	meta        metadata.Interface
	getter      *restGetter
	charts      cache.GenericLister
	configs     cache.GenericLister
	queue       workqueue.TypedRateLimitingInterface[string]
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder

	// reported remembers, per HelmChart, the last warning and the
	// generation whose unused fields were reported, so that retries do not
	// repeat events.
	reportMu sync.Mutex
	reported map[types.UID]report
}

type report struct {
	warning    string
	ignoredGen int64
}

// New validates o.
func New(o Options) (*Controller, error) {
	if o.Kubeconfig == "" {
		return nil, errors.New("helm-controller: no kubeconfig")
	}
	if o.Resync < 0 || o.RetryBase < 0 || o.RetryMax < 0 {
		return nil, errors.New("helm-controller: negative period")
	}
	if o.Resync == 0 {
		o.Resync = DefaultResync
	}
	if o.RetryBase == 0 {
		o.RetryBase = 2 * time.Second
	}
	if o.RetryMax == 0 {
		o.RetryMax = 5 * time.Minute
	}
	return &Controller{o: o, reported: map[types.UID]report{}}, nil
}

// Name is the component's name.
func (c *Controller) Name() string { return ComponentName }

// Start builds the clients and starts, in the background, the CRDs, the
// informers and the worker.
func (c *Controller) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil || c.stopped {
		return nil
	}
	// Burst: an install creates a chart's objects in one run.
	cfg, err := kubeclient.Config(c.o.Kubeconfig, ComponentName, kubeclient.Burst)
	if err != nil {
		return err
	}
	c.cfg = cfg
	if c.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("helm-controller: %w", err)
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return fmt.Errorf("helm-controller: %w", err)
	}
	if c.meta, err = metadata.NewForConfig(cfg); err != nil {
		return fmt.Errorf("helm-controller: %w", err)
	}
	if c.getter, err = newRESTGetter(cfg, c.o.Kubeconfig); err != nil {
		return fmt.Errorf("helm-controller: %w", err)
	}
	logger := klog.FromContext(ctx).WithName(ComponentName)
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	c.broadcaster = record.NewBroadcaster(record.WithContext(runCtx))
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	c.recorder = c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: ComponentName})
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](c.o.RetryBase, c.o.RetryMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: ComponentName})
	c.cancel, c.done, c.ready = cancel, make(chan struct{}), make(chan struct{})
	go c.run(runCtx)
	return nil
}

// run applies the CRDs, starts the informers and works the queue until
// the context ends.
func (c *Controller) run(ctx context.Context) {
	defer close(c.done)
	defer c.broadcaster.Shutdown()
	defer c.queue.ShutDown()
	fail := func(err error) {
		c.mu.Lock()
		c.failed = err
		c.mu.Unlock()
	}
	if err := ensureCRDs(ctx, c.cfg); err != nil {
		fail(err)
		return
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(c.dyn, c.o.Resync)
	defer factory.Shutdown()
	chartInf := factory.ForResource(HelmChartResource)
	configInf := factory.ForResource(HelmChartConfigResource)
	c.charts, c.configs = chartInf.Lister(), configInf.Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue}
	for _, inf := range []cache.SharedIndexInformer{chartInf.Informer(), configInf.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			fail(fmt.Errorf("helm-controller: %w", err))
			return
		}
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), chartInf.Informer().HasSynced, configInf.Informer().HasSynced) {
		fail(errors.New("helm-controller: stopped before the informers synced"))
		return
	}
	close(c.ready)
	go func() { <-ctx.Done(); c.queue.ShutDown() }()
	for c.processNext(ctx) {
	}
}

// Ready waits until the CRDs are served and the informers have synced.
func (c *Controller) Ready(ctx context.Context) error {
	c.mu.Lock()
	ready, done := c.ready, c.done
	c.mu.Unlock()
	if ready == nil {
		return errors.New("helm-controller: not started")
	}
	select {
	case <-ready:
		return nil
	case <-done:
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.failed != nil {
			return c.failed
		}
		return errors.New("helm-controller: stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop ends the worker (an operation under way is given up: its release is
// taken up again at the next start) and the informers.
func (c *Controller) Stop(ctx context.Context) error {
	c.mu.Lock()
	c.stopped = true
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	return component.StopWorker(ctx, cancel, done)
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := c.sync(ctx, key)
	switch {
	case err == nil || isPermanent(err):
		c.queue.Forget(key)
	case ctx.Err() != nil:
	default:
		klog.FromContext(ctx).V(2).Info("Retrying", "helmchart", key, "err", err.Error())
		c.queue.AddRateLimited(key)
	}
	return true
}

// chart is the HelmChart of key from the informer, nil when it is gone.
func (c *Controller) chart(key string) (*unstructured.Unstructured, *HelmChart, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil, nil, nil
	}
	obj, err := c.charts.ByNamespace(ns).Get(name)
	if err != nil {
		return nil, nil, nil //nolint:nilerr // not found: nothing to do (a deletion went through the finalizer)
	}
	u := obj.(*unstructured.Unstructured)
	hc := &HelmChart{}
	if err := fromUnstructured(u, hc); err != nil {
		return nil, nil, permanent("HelmChart %s: %w", key, err)
	}
	return u, hc, nil
}

// config is the HelmChartConfig of the HelmChart, nil when there is none.
func (c *Controller) config(hc *HelmChart) (*HelmChartConfig, error) {
	obj, err := c.configs.ByNamespace(hc.Namespace).Get(hc.Name)
	if err != nil {
		return nil, nil //nolint:nilerr // none
	}
	conf := &HelmChartConfig{}
	if err := fromUnstructured(obj, conf); err != nil {
		return nil, permanent("HelmChartConfig %s/%s: %w", hc.Namespace, hc.Name, err)
	}
	return conf, nil
}
