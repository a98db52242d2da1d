// Package ingress is edgeplane's Ingress controller: a reverse proxy in the
// server's process, with no pod and no image, that follows Ingress,
// IngressClass, Service, EndpointSlice and TLS Secret objects and serves
// HTTP on port 80 and HTTPS on port 443 of the server's node.
//
// Every node answers on those ports through the service load balancer: the
// packaged manifest (pkg/manifests/packaged/ingress.yaml) makes the
// IngressClass "edgeplane" (the default) and the LoadBalancer Service
// kube-system/edgeplane-ingress, and each server that runs the proxy
// publishes an EndpointSlice of its node's addresses for it, so that
// servicelb gives the Service the nodes' addresses and kube-proxy forwards
// those ports on every node to the proxy. Each Ingress of ours gets the
// Service's addresses as its status.
//
// Routing follows the Ingress spec: hosts exact or wildcard ("*.example.com"
// is one label), pathType Exact or Prefix (element-wise; ImplementationSpecific
// is Prefix), longest path first, Exact before Prefix, then rules without a
// host, then the default backend; requests go straight to the ready
// endpoints of the backend Service's port, round robin. TLS: the
// certificate of the Ingress's TLS Secret for the name the client asks for
// (SNI), else a self-signed one.
//
// It acts as the user edgeplane:ingress (the admin kubeconfig,
// impersonating), whose ClusterRole (EnsureRBAC) reads what it follows and
// writes only Ingress status, its own EndpointSlices and Events.
//
//	Start: start the informers, the listeners and the worker; returns at once.
//	Ready: nil once the informers have synced and the first table is built.
//	Stop:  close the listeners (requests in flight may end), stop the rest.
package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ComponentName is the component's name and its --disable name.
const ComponentName = "ingress"

// Options configure the controller.
type Options struct {
	// Kubeconfig is an admin kubeconfig; the controller impersonates User.
	Kubeconfig string
	// NodeName and NodeIPs are the server's own node: the addresses the
	// EndpointSlice publishes.
	NodeName string
	NodeIPs  []net.IP
	// HTTPAddress and HTTPSAddress are where to listen; empty: ":80" and
	// ":443" (every address of the host).
	HTTPAddress, HTTPSAddress string
	// Dial dials backends; nil dials directly (tests route addresses).
	Dial Dialer
}

// Controller is the component.
type Controller struct {
	o Options

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	synced  []cache.InformerSynced
	built   chan struct{} // closed once the first table is built
	stopped bool

	proxy     *Proxy
	listeners []*listener
	client    kubernetes.Interface
	kick      chan struct{}
	certs     certCache

	factory informers.SharedInformerFactory
	secrets informers.SharedInformerFactory

	reportedMu sync.Mutex
	reported   map[string]string // problems reported, by Ingress

	// syncs counts completed syncs, writes the write requests sent (tests
	// wait on and check them).
	syncs, writes atomic.Int64
}

// New validates o.
func New(o Options) (*Controller, error) {
	if o.Kubeconfig == "" {
		return nil, errors.New("ingress: no kubeconfig")
	}
	if o.NodeName == "" || len(o.NodeIPs) == 0 {
		return nil, errors.New("ingress: no node name or address")
	}
	if o.HTTPAddress == "" {
		o.HTTPAddress = ":80"
	}
	if o.HTTPSAddress == "" {
		o.HTTPSAddress = ":443"
	}
	return &Controller{o: o, built: make(chan struct{}), kick: make(chan struct{}, 1)}, nil
}

// Name is the component's name.
func (c *Controller) Name() string { return ComponentName }

// Start starts the informers, the listeners and the worker.
func (c *Controller) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil || c.stopped {
		return nil
	}
	client, err := Client(c.o.Kubeconfig)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithName(ComponentName)
	proxy, err := NewProxy(logger, c.o.Dial)
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	c.client, c.proxy = client, proxy
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))

	c.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(stripObject))
	c.secrets = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(stripObject),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS)).String()
		}))
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.trigger() },
		UpdateFunc: func(any, any) { c.trigger() },
		DeleteFunc: func(any) { c.trigger() },
	}
	infs := []cache.SharedIndexInformer{
		c.factory.Networking().V1().Ingresses().Informer(),
		c.factory.Networking().V1().IngressClasses().Informer(),
		c.factory.Core().V1().Services().Informer(),
		c.factory.Discovery().V1().EndpointSlices().Informer(),
		c.secrets.Core().V1().Secrets().Informer(),
	}
	c.synced = nil
	for _, inf := range infs {
		if _, err := inf.AddEventHandler(handler); err != nil {
			cancel()
			return fmt.Errorf("ingress: %w", err)
		}
		c.synced = append(c.synced, inf.HasSynced)
	}
	c.factory.Start(runCtx.Done())
	c.secrets.Start(runCtx.Done())

	c.listeners = []*listener{
		newListener("http", c.o.HTTPAddress, proxy, logger, func(int32) { c.trigger() }),
		newListener("https", c.o.HTTPSAddress, proxy, logger, func(int32) { c.trigger() }),
	}
	done := make(chan struct{})
	c.cancel, c.done = cancel, done
	var wg sync.WaitGroup
	for _, l := range c.listeners {
		wg.Add(1)
		go func() { defer wg.Done(); l.run(runCtx) }()
	}
	go func() {
		defer close(done)
		defer wg.Wait()
		defer c.factory.Shutdown()
		defer c.secrets.Shutdown()
		if !cache.WaitForCacheSync(runCtx.Done(), c.synced...) {
			return
		}
		c.work(runCtx)
	}()
	return nil
}

// Ready waits for the informers' first lists and the first table.
func (c *Controller) Ready(ctx context.Context) error {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if done == nil {
		return errors.New("ingress: not started")
	}
	select {
	case <-c.built:
		return nil
	case <-done:
		return errors.New("ingress: stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop closes the listeners, letting requests in flight end within ctx,
// and stops the worker and the informers.
func (c *Controller) Stop(ctx context.Context) error {
	c.mu.Lock()
	c.stopped = true
	cancel, done, listeners := c.cancel, c.done, c.listeners
	c.mu.Unlock()
	if done == nil {
		return nil
	}
	errs := make([]error, len(listeners))
	var wg sync.WaitGroup
	for i, l := range listeners {
		wg.Go(func() { errs[i] = l.shutdown(ctx) })
	}
	wg.Wait()
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// Addresses are where the listeners are bound (nil for one not bound).
func (c *Controller) Addresses() (http, https net.Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.listeners) < 2 {
		return nil, nil
	}
	return c.listeners[0].Addr(), c.listeners[1].Addr()
}

func (c *Controller) trigger() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// retryAfter is how soon a failed write is tried again.
const retryAfter = 5 * time.Second

// work rebuilds the table and writes the status after every change, one
// change at a time; a failed write is retried after retryAfter.
func (c *Controller) work(ctx context.Context) {
	logger := klog.FromContext(ctx)
	var retry <-chan time.Time
	first := true
	for {
		if err := c.sync(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Ingress: updating the status: retrying")
			retry = time.After(retryAfter)
		}
		c.syncs.Add(1)
		if first {
			close(c.built)
			first = false
		}
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-retry:
			retry = nil
		}
	}
}

// sync builds the table from the informers' caches and publishes it, the
// node's EndpointSlices and the Ingresses' status.
func (c *Controller) sync(ctx context.Context) error {
	o, err := c.objects()
	if err != nil {
		return err
	}
	table, ours, problems := Build(o)
	c.certs.prune()
	c.proxy.SetTable(table)
	c.reportProblems(ctx, problems, ours)
	httpAddr, httpsAddr := c.Addresses()
	var errs []error
	if err := c.publishEndpoints(ctx, o.Services[ServiceNamespace+"/"+ServiceName], portOf(httpAddr), portOf(httpsAddr)); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.writeStatus(ctx, o, ours))
	return errors.Join(errs...)
}

// objects reads the informers' caches.
func (c *Controller) objects() (Objects, error) {
	f := c.factory
	ings, err := f.Networking().V1().Ingresses().Lister().List(labels.Everything())
	if err != nil {
		return Objects{}, err
	}
	classList, err := f.Networking().V1().IngressClasses().Lister().List(labels.Everything())
	if err != nil {
		return Objects{}, err
	}
	svcList, err := f.Core().V1().Services().Lister().List(labels.Everything())
	if err != nil {
		return Objects{}, err
	}
	sliceList, err := f.Discovery().V1().EndpointSlices().Lister().List(labels.Everything())
	if err != nil {
		return Objects{}, err
	}
	o := Objects{Ingresses: ings, Classes: map[string]*networkingv1.IngressClass{}, Services: map[string]*corev1.Service{}, Slices: map[string][]*discoveryv1.EndpointSlice{}}
	for _, cl := range classList {
		o.Classes[cl.Name] = cl
	}
	for _, s := range svcList {
		o.Services[s.Namespace+"/"+s.Name] = s
	}
	for _, s := range sliceList {
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			o.Slices[s.Namespace+"/"+name] = append(o.Slices[s.Namespace+"/"+name], s)
		}
	}
	secrets := c.secrets.Core().V1().Secrets().Lister()
	o.Cert = func(ns, name string) (*tls.Certificate, error) {
		s, err := secrets.Secrets(ns).Get(name)
		if err != nil {
			return nil, errors.New("no such Secret of type kubernetes.io/tls")
		}
		return c.certs.get(s)
	}
	return o, nil
}

// certCache keeps parsed certificates by Secret UID and resourceVersion,
// so that a rebuild parses only Secrets that changed.
type certCache struct {
	mu sync.Mutex
	m  map[string]certEntry
}

type certEntry struct {
	used    bool
	version string
	cert    *tls.Certificate
	err     error
}

func (cc *certCache) get(s *corev1.Secret) (*tls.Certificate, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.m == nil {
		cc.m = map[string]certEntry{}
	}
	key := string(s.UID)
	e, ok := cc.m[key]
	if !ok || e.version != s.ResourceVersion {
		e.cert, e.err = ParseCert(s.Data)
		e.version = s.ResourceVersion
	}
	e.used = true
	cc.m[key] = e
	return e.cert, e.err
}

// prune forgets the certificates no build used since the last prune.
func (cc *certCache) prune() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for k, e := range cc.m {
		if !e.used {
			delete(cc.m, k)
			continue
		}
		e.used = false
		cc.m[k] = e
	}
}
