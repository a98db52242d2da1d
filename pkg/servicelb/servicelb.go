// Package servicelb gives Services of type LoadBalancer the addresses of the
// cluster's Ready nodes as their ingress, in the server's process and
// without extra pods: on an edge cluster there is no cloud load balancer,
// and a chart that asks for one should still get an address (k3s's
// servicelb idea). kube-proxy makes every node answer on the Service's
// ports at those addresses.
//
// A Service is ours when it has no spec.loadBalancerClass or has
// LoadBalancerClass. Its status.loadBalancer.ingress is set to the
// ExternalIP of each Ready node, or its InternalIP when it has none, of the
// Service's IP families, sorted; it is written only when it differs, so an
// idle cluster costs no writes.
//
//	Start: start the informers and the worker; returns at once.
//	Ready: nil once the informers have synced.
//	Stop:  stop the worker and the informers; idempotent.
package servicelb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"sync"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// LoadBalancerClass is the spec.loadBalancerClass this controller serves
// besides Services with none.
const LoadBalancerClass = "edgeplane.io/servicelb"

// Options configure the controller.
type Options struct {
	// Kubeconfig is the kubeconfig it acts with (it reads Nodes and
	// Services and updates Services' status).
	Kubeconfig string
	// Informers, when set, is the shared informer factory it reads Nodes
	// and Services from (the API server's, chain.Server.Informers), with
	// its handlers removed on Stop and the informers left running; else it
	// lists and watches them with its own.
	Informers informers.SharedInformerFactory
}

// Controller keeps LoadBalancer Services' ingress on the Ready nodes.
type Controller struct {
	o Options

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	synced  []cache.InformerSynced
	client  kubernetes.Interface
	nodes   corelisters.NodeLister
	svcs    corelisters.ServiceLister
	queue   workqueue.TypedRateLimitingInterface[string]
	stopped bool
}

// New validates o.
func New(o Options) (*Controller, error) {
	if o.Kubeconfig == "" {
		return nil, errors.New("servicelb: no kubeconfig")
	}
	return &Controller{o: o}, nil
}

// Name is the component's name.
func (c *Controller) Name() string { return "servicelb" }

// Start starts the informers and the worker.
func (c *Controller) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil || c.stopped {
		return nil
	}
	client, err := kubeclient.New(c.o.Kubeconfig, "servicelb", kubeclient.Steady)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithName("servicelb")
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	factory, own := c.o.Informers, false
	if factory == nil {
		factory, own = informers.NewSharedInformerFactory(client, 0), true
	}
	nodeInf := factory.Core().V1().Nodes()
	svcInf := factory.Core().V1().Services()
	c.client, c.nodes, c.svcs = client, nodeInf.Lister(), svcInf.Lister()
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "servicelb"})
	// No resync, whatever the factory's: a change of a node or a Service
	// is all that queues work.
	var handlers component.Handlers
	if err := handlers.Add(svcInf.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueService,
		UpdateFunc: func(_, obj any) { c.enqueueService(obj) },
	}); err != nil {
		cancel()
		return fmt.Errorf("servicelb: %w", err)
	}
	if err := handlers.Add(nodeInf.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.enqueueAll(logger) },
		UpdateFunc: func(old, obj any) {
			o, n := old.(*corev1.Node), obj.(*corev1.Node)
			if nodeReady(o) != nodeReady(n) || !slices.Equal(ipStrings(nodeAddresses(o)), ipStrings(nodeAddresses(n))) || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) {
				c.enqueueAll(logger)
			}
		},
		DeleteFunc: func(any) { c.enqueueAll(logger) },
	}); err != nil {
		handlers.Remove(logger)
		cancel()
		return fmt.Errorf("servicelb: %w", err)
	}
	c.synced = handlers.Synced()
	factory.Start(runCtx.Done())
	done := make(chan struct{})
	c.cancel, c.done = cancel, done
	go func() {
		defer close(done)
		if own {
			defer factory.Shutdown()
		}
		defer handlers.Remove(logger)
		defer c.queue.ShutDown()
		if !cache.WaitForCacheSync(runCtx.Done(), c.synced...) {
			return
		}
		go func() { <-runCtx.Done(); c.queue.ShutDown() }()
		for c.processNext(runCtx) {
		}
	}()
	return nil
}

// Ready waits for the informers' first lists.
func (c *Controller) Ready(ctx context.Context) error {
	c.mu.Lock()
	synced := c.synced
	c.mu.Unlock()
	return component.WaitSynced(ctx, "servicelb", synced)
}

// Stop stops the worker and the informers.
func (c *Controller) Stop(ctx context.Context) error {
	c.mu.Lock()
	c.stopped = true
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	return component.StopWorker(ctx, cancel, done)
}

func (c *Controller) enqueueService(obj any) {
	svc, ok := obj.(*corev1.Service)
	if !ok || !Ours(svc) {
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(svc)
	if err == nil {
		c.queue.Add(key)
	}
}

// enqueueAll queues every Service of ours: the nodes changed.
func (c *Controller) enqueueAll(logger klog.Logger) {
	svcs, err := c.svcs.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Listing Services")
		return
	}
	for _, svc := range svcs {
		c.enqueueService(svc)
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "Updating a LoadBalancer Service's ingress: retrying", "service", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// sync sets one Service's ingress when it differs from the nodes'.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil
	}
	svc, err := c.svcs.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !Ours(svc) {
		return nil
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	want := Ingress(nodes, svc.Spec.IPFamilies)
	if sameIPs(svc.Status.LoadBalancer.Ingress, want) {
		return nil
	}
	updated := svc.DeepCopy()
	updated.Status.LoadBalancer.Ingress = want
	if _, err := c.client.CoreV1().Services(ns).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: "edgeplane-servicelb"}); err != nil {
		return err
	}
	klog.FromContext(ctx).V(1).Info("Set LoadBalancer ingress", "service", key, "ingress", ingressIPs(want))
	return nil
}

// Ours tells whether svc is a LoadBalancer Service this controller serves.
func Ours(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	return svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass == LoadBalancerClass
}

// Ingress is the ingress of a LoadBalancer Service of the given IP families
// (none: any): per Ready node not being deleted, its ExternalIPs, or its
// InternalIPs when it has no ExternalIP; sorted and without duplicates.
func Ingress(nodes []*corev1.Node, families []corev1.IPFamily) []corev1.LoadBalancerIngress {
	var ips []net.IP
	for _, n := range nodes {
		if !nodeReady(n) || n.DeletionTimestamp != nil {
			continue
		}
		for _, ip := range nodeAddresses(n) {
			if familyWanted(ip, families) {
				ips = append(ips, ip)
			}
		}
	}
	sort.Slice(ips, func(i, j int) bool {
		a, b := ips[i], ips[j]
		if (a.To4() == nil) != (b.To4() == nil) {
			return a.To4() != nil // IPv4 first
		}
		return bytes.Compare(a.To16(), b.To16()) < 0
	})
	var out []corev1.LoadBalancerIngress
	for i, ip := range ips {
		if i > 0 && ip.Equal(ips[i-1]) {
			continue
		}
		out = append(out, corev1.LoadBalancerIngress{IP: ip.String()})
	}
	return out
}

// nodeAddresses are the addresses a node is reached at from outside: its
// ExternalIPs, else its InternalIPs.
func nodeAddresses(n *corev1.Node) []net.IP {
	var external, internal []net.IP
	for _, a := range n.Status.Addresses {
		ip := net.ParseIP(a.Address)
		if ip == nil {
			continue
		}
		switch a.Type {
		case corev1.NodeExternalIP:
			external = append(external, ip)
		case corev1.NodeInternalIP:
			internal = append(internal, ip)
		}
	}
	if len(external) > 0 {
		return external
	}
	return internal
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func familyWanted(ip net.IP, families []corev1.IPFamily) bool {
	if len(families) == 0 {
		return true
	}
	fam := corev1.IPv6Protocol
	if ip.To4() != nil {
		fam = corev1.IPv4Protocol
	}
	return slices.Contains(families, fam)
}

// sameIPs compares the ingress IPs, in order; other fields (ipMode, which the
// API server defaults) do not count.
func sameIPs(a, b []corev1.LoadBalancerIngress) bool {
	return slices.Equal(ingressIPs(a), ingressIPs(b))
}

func ingressIPs(in []corev1.LoadBalancerIngress) []string {
	out := make([]string, 0, len(in))
	for _, i := range in {
		out = append(out, i.IP)
	}
	return out
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}
