package controllers

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/admissionregistration"
	"k8s.io/client-go/informers/apiserverinternal"
	"k8s.io/client-go/informers/apps"
	"k8s.io/client-go/informers/autoscaling"
	"k8s.io/client-go/informers/batch"
	"k8s.io/client-go/informers/certificates"
	"k8s.io/client-go/informers/coordination"
	"k8s.io/client-go/informers/core"
	"k8s.io/client-go/informers/discovery"
	"k8s.io/client-go/informers/events"
	"k8s.io/client-go/informers/extensions"
	"k8s.io/client-go/informers/flowcontrol"
	"k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/informers/lifecycle"
	"k8s.io/client-go/informers/networking"
	"k8s.io/client-go/informers/node"
	"k8s.io/client-go/informers/policy"
	"k8s.io/client-go/informers/rbac"
	"k8s.io/client-go/informers/resource"
	"k8s.io/client-go/informers/scheduling"
	"k8s.io/client-go/informers/storage"
	"k8s.io/client-go/informers/storagemigration"
	"k8s.io/client-go/tools/cache"
)

// errShared is returned by what would change a shared informer for every
// reader of it.
var errShared = errors.New("the informer is the API server's, shared with its other readers: it cannot be changed")

// errTermEnded is returned by a handler registration after Shutdown.
var errTermEnded = errors.New("the component's term has ended")

// privateType is a type a component keeps an informer of its own for, with
// the resource ForResource knows it by.
type privateType struct {
	obj      runtime.Object
	resource schema.GroupVersionResource
}

// termInformers is one term of an upstream component (the scheduler, the
// root-ca-cert-publisher) reading the API server's shared informer factory
// (chain.Server.Informers) in place of a factory of its own, so that it opens
// no second watch of what the API server already lists and watches for
// itself. Every typed informer it hands
// out is the API server's, except those of the private types, which come
// from the component's own factory (the scheduler's Pods: only non-terminal
// ones, a field selector no other reader shares).
//
// What the component sees as from its own factory:
//   - handlers are registered with the component's resync period (resync),
//     not the API server's, unless the component asks for one; Shutdown
//     removes every handler registered through it, so a term that ends (a
//     restart, a lost lease) leaves nothing behind on informers that outlive
//     it;
//   - Start and WaitForCacheSync cover both factories; Start does not bind
//     the API server's informers to the caller's channel: they run as long
//     as the chain (chain.Server.Informers);
//   - objects come without managedFields, as from upstream's factories.
//
// It reads with the API server's loopback identity instead of the
// component's. Nothing leaves the process: the component runs in it and
// hands no credential out, and what it writes still goes through its own
// client, so no credential may do more than before.
type termInformers struct {
	informers.SharedInformerFactory // the API server's
	own                             informers.SharedInformerFactory
	private                         map[reflect.Type]bool
	privateResources                map[schema.GroupVersionResource]bool
	resync                          time.Duration
	component                       string

	mu       sync.Mutex
	wrapped  map[cache.SharedIndexInformer]*termInformer
	handlers []termHandler
	ended    bool
}

type termHandler struct {
	informer cache.SharedIndexInformer
	handle   cache.ResourceEventHandlerRegistration
}

var _ informers.SharedInformerFactory = (*termInformers)(nil)

// addedIndexes records which component added which index to which of the
// API server's informers, for as long as the process (and so the informers)
// lives. Indexes cannot be removed: a later term of a component adds its
// index again, and client-go refuses a name it already has. So a name a
// component added before is taken as the same index when it adds it again
// (a component adds the same index functions every term), while a name
// added by anyone else is still a conflict.
var addedIndexes = struct {
	mu sync.Mutex
	by map[termIndex]string // the component
}{by: map[termIndex]string{}}

type termIndex struct {
	informer cache.SharedIndexInformer
	name     string
}

// newTermInformers is one term of component (its name, for addedIndexes).
func newTermInformers(component string, shared, own informers.SharedInformerFactory, resync time.Duration, private ...privateType) *termInformers {
	f := &termInformers{
		SharedInformerFactory: shared, own: own, resync: resync, component: component,
		private: map[reflect.Type]bool{}, privateResources: map[schema.GroupVersionResource]bool{},
		wrapped: map[cache.SharedIndexInformer]*termInformer{},
	}
	for _, p := range private {
		f.private[reflect.TypeOf(p.obj)] = true
		f.privateResources[p.resource] = true
	}
	return f
}

// InformerFor is where every typed informer of the groups below comes from.
func (f *termInformers) InformerFor(obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) cache.SharedIndexInformer {
	if f.private[reflect.TypeOf(obj)] {
		return f.own.InformerFor(obj, newFunc)
	}
	return f.wrap(f.SharedInformerFactory.InformerFor(obj, newFunc))
}

func (f *termInformers) wrap(inner cache.SharedIndexInformer) cache.SharedIndexInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w, ok := f.wrapped[inner]; ok {
		return w
	}
	w := &termInformer{SharedIndexInformer: inner, f: f}
	f.wrapped[inner] = w
	return w
}

// ForResource is the generic informer of resource, from the same factory
// its typed informer comes from.
func (f *termInformers) ForResource(resource schema.GroupVersionResource) (informers.GenericInformer, error) {
	if f.privateResources[resource] {
		return f.own.ForResource(resource)
	}
	g, err := f.SharedInformerFactory.ForResource(resource)
	if err != nil {
		return nil, err
	}
	return termGeneric{GenericInformer: g, informer: f.wrap(g.Informer())}, nil
}

// Start starts what the component asked for: the API server's informers for
// as long as the chain runs, its own until stopCh closes.
func (f *termInformers) Start(stopCh <-chan struct{}) {
	f.SharedInformerFactory.Start(stopCh)
	f.own.Start(stopCh)
}

// StartWithContext is Start until ctx ends.
func (f *termInformers) StartWithContext(ctx context.Context) {
	f.SharedInformerFactory.Start(ctx.Done())
	f.own.StartWithContext(ctx)
}

// WaitForCacheSync waits for the started informers of both factories.
func (f *termInformers) WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool {
	synced := f.SharedInformerFactory.WaitForCacheSync(stopCh)
	for t, ok := range f.own.WaitForCacheSync(stopCh) {
		synced[t] = ok
	}
	return synced
}

// WaitForCacheSyncWithContext waits for the started informers of both
// factories.
func (f *termInformers) WaitForCacheSyncWithContext(ctx context.Context) cache.SyncResult {
	res := f.SharedInformerFactory.WaitForCacheSyncWithContext(ctx)
	own := f.own.WaitForCacheSyncWithContext(ctx)
	if res.Synced == nil {
		res.Synced = map[reflect.Type]bool{}
	}
	for t, ok := range own.Synced {
		res.Synced[t] = ok
	}
	if res.Err == nil {
		res.Err = own.Err
	}
	return res
}

// Shutdown ends the term: it removes every handler registered through f
// from the API server's informers, which run on, and shuts the component's
// own factory down. Idempotent.
func (f *termInformers) Shutdown() {
	f.mu.Lock()
	handlers := f.handlers
	f.handlers, f.ended = nil, true
	f.mu.Unlock()
	for _, h := range handlers {
		// The one error is a handle the informer does not know: already removed.
		_ = h.informer.RemoveEventHandler(h.handle)
	}
	f.own.Shutdown()
}

// registered is how many handlers f has on the API server's informers.
func (f *termInformers) registered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.handlers)
}

// termInformer is one of the API server's informers as a component's term
// sees it.
type termInformer struct {
	cache.SharedIndexInformer
	f *termInformers
}

func (i *termInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, cache.HandlerOptions{})
}

func (i *termInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, cache.HandlerOptions{ResyncPeriod: &resync})
}

// AddEventHandlerWithOptions registers h with the component's resync period
// unless options name one, and keeps it for Shutdown to remove.
func (i *termInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	if options.ResyncPeriod == nil {
		resync := i.f.resync
		options.ResyncPeriod = &resync
	}
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	if i.f.ended {
		return nil, errTermEnded
	}
	handle, err := i.SharedIndexInformer.AddEventHandlerWithOptions(h, options)
	if err != nil {
		return nil, err
	}
	i.f.handlers = append(i.f.handlers, termHandler{informer: i.SharedIndexInformer, handle: handle})
	return handle, nil
}

func (i *termInformer) RemoveEventHandler(handle cache.ResourceEventHandlerRegistration) error {
	i.f.mu.Lock()
	for n, h := range i.f.handlers {
		if h.handle == handle {
			i.f.handlers = append(i.f.handlers[:n], i.f.handlers[n+1:]...)
			break
		}
	}
	i.f.mu.Unlock()
	return i.SharedIndexInformer.RemoveEventHandler(handle)
}

// AddIndexers adds to the informer the indexers an earlier term of the
// component has not added already (addedIndexes).
func (i *termInformer) AddIndexers(indexers cache.Indexers) error {
	addedIndexes.mu.Lock()
	defer addedIndexes.mu.Unlock()
	add := cache.Indexers{}
	for name, fn := range indexers {
		if addedIndexes.by[termIndex{informer: i.SharedIndexInformer, name: name}] != i.f.component {
			add[name] = fn
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := i.SharedIndexInformer.AddIndexers(add); err != nil {
		return err
	}
	for name := range add {
		addedIndexes.by[termIndex{informer: i.SharedIndexInformer, name: name}] = i.f.component
	}
	return nil
}

// Run and RunWithContext start the informer with the API server's others
// (it runs as long as the chain) and return when the caller's run would.
func (i *termInformer) Run(stopCh <-chan struct{}) {
	i.f.SharedInformerFactory.Start(stopCh)
	<-stopCh
}

func (i *termInformer) RunWithContext(ctx context.Context) { i.Run(ctx.Done()) }

// SetTransform and the watch error handlers would change the informer for
// every reader of it: refused (the scheduler sets a transform only on its
// private Pods).
func (i *termInformer) SetTransform(cache.TransformFunc) error { return errShared }

func (i *termInformer) SetWatchErrorHandler(cache.WatchErrorHandler) error { return errShared }

func (i *termInformer) SetWatchErrorHandlerWithContext(cache.WatchErrorHandlerWithContext) error {
	return errShared
}

// termGeneric is a generic informer whose informer is a termInformer.
type termGeneric struct {
	informers.GenericInformer
	informer cache.SharedIndexInformer
}

func (g termGeneric) Informer() cache.SharedIndexInformer { return g.informer }

// The groups: each builds its informers through f.InformerFor, as
// client-go's factory does through itself (cluster-wide, untweaked, like the
// API server's factory). TestTermInformersEveryGroup walks them all.

func (f *termInformers) Admissionregistration() admissionregistration.Interface {
	return admissionregistration.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Internal() apiserverinternal.Interface {
	return apiserverinternal.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Apps() apps.Interface { return apps.New(f, metav1.NamespaceAll, nil) }
func (f *termInformers) Autoscaling() autoscaling.Interface {
	return autoscaling.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Batch() batch.Interface { return batch.New(f, metav1.NamespaceAll, nil) }
func (f *termInformers) Certificates() certificates.Interface {
	return certificates.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Coordination() coordination.Interface {
	return coordination.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Core() core.Interface { return core.New(f, metav1.NamespaceAll, nil) }
func (f *termInformers) Discovery() discovery.Interface {
	return discovery.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Events() events.Interface { return events.New(f, metav1.NamespaceAll, nil) }
func (f *termInformers) Extensions() extensions.Interface {
	return extensions.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Flowcontrol() flowcontrol.Interface {
	return flowcontrol.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Lifecycle() lifecycle.Interface {
	return lifecycle.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Networking() networking.Interface {
	return networking.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Node() node.Interface     { return node.New(f, metav1.NamespaceAll, nil) }
func (f *termInformers) Policy() policy.Interface { return policy.New(f, metav1.NamespaceAll, nil) }
func (f *termInformers) Rbac() rbac.Interface     { return rbac.New(f, metav1.NamespaceAll, nil) }
func (f *termInformers) Resource() resource.Interface {
	return resource.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Scheduling() scheduling.Interface {
	return scheduling.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Storage() storage.Interface {
	return storage.New(f, metav1.NamespaceAll, nil)
}
func (f *termInformers) Storagemigration() storagemigration.Interface {
	return storagemigration.New(f, metav1.NamespaceAll, nil)
}
