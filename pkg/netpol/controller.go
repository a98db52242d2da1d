// Package netpol enforces networking.k8s.io/v1 NetworkPolicy on the pods of
// one node with nftables, in process.
//
// The controller watches NetworkPolicies, Pods and Namespaces and keeps one
// table of its own, inet edgeplane-netpol, equal to what they ask for: each
// change rebuilds the whole table in one atomic nft transaction, at most
// once per MinSyncInterval, and only when the computed rules differ from the
// ones last written. It never reads or writes any other table.
package netpol

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"
)

// Defaults of Options.
const (
	DefaultMinSyncInterval = time.Second
	DefaultResyncPeriod    = 5 * time.Minute
)

// syncKey is the one key of the work queue: every change means "rebuild".
const syncKey = "table"

// Options configure a Controller.
type Options struct {
	// Client reads NetworkPolicies, Pods and Namespaces (cluster-wide).
	Client kubernetes.Interface
	// NodeName is the node whose pods are enforced.
	NodeName string
	// NFT writes the table; nil: knftables.New for inet edgeplane-netpol,
	// which runs the nft command in this process's network namespace.
	NFT knftables.Interface
	// MinSyncInterval is the least time between two rebuilds (bursts of
	// changes coalesce into one); 0: DefaultMinSyncInterval.
	MinSyncInterval time.Duration
	// ResyncPeriod is how often the table is checked even without a change
	// (it is rewritten only if someone removed it); 0: DefaultResyncPeriod.
	ResyncPeriod time.Duration
}

// Controller keeps the table in step with the cluster's policies.
type Controller struct {
	opts       Options
	nft        knftables.Interface
	factory    informers.SharedInformerFactory
	pods       corelisters.PodLister
	namespaces corelisters.NamespaceLister
	policies   networkinglisters.NetworkPolicyLister
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]

	written string    // fingerprint of the table last written
	lastRun time.Time // end of the last rebuild attempt

	firstSync     chan struct{} // closed after the first successful sync
	firstSyncOnce sync.Once

	syncs  atomic.Int64 // sync calls done, for tests
	writes atomic.Int64 // transactions run, for tests
}

// New validates opts and builds a Controller; nothing runs until Run.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil {
		return nil, errors.New("netpol: no API client")
	}
	if opts.NodeName == "" {
		return nil, errors.New("netpol: no node name")
	}
	if opts.MinSyncInterval <= 0 {
		opts.MinSyncInterval = DefaultMinSyncInterval
	}
	if opts.ResyncPeriod <= 0 {
		opts.ResyncPeriod = DefaultResyncPeriod
	}
	nft := opts.NFT
	if nft == nil {
		var err error
		if nft, err = knftables.New(knftables.InetFamily, TableName); err != nil {
			return nil, fmt.Errorf("network policy needs nftables (the nft command, v1.0.1 or later, and a kernel with nf_tables): %w", err)
		}
	}
	// No informer resync: the periodic check below does that job without
	// replaying every object through the handlers.
	factory := informers.NewSharedInformerFactory(opts.Client, 0)
	c := &Controller{
		opts:      opts,
		nft:       nft,
		factory:   factory,
		firstSync: make(chan struct{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "netpol"}),
	}
	podInf := factory.Core().V1().Pods()
	// Every node keeps every pod (peers live anywhere): keep only what the
	// rules need, to keep the cache small on small boards.
	if err := podInf.Informer().SetTransform(trimPod); err != nil {
		return nil, fmt.Errorf("netpol: %w", err)
	}
	nsInf := factory.Core().V1().Namespaces()
	npInf := factory.Networking().V1().NetworkPolicies()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.queue.Add(syncKey) },
		UpdateFunc: func(_, _ any) { c.queue.Add(syncKey) },
		DeleteFunc: func(any) { c.queue.Add(syncKey) },
	}
	for _, inf := range []cache.SharedIndexInformer{podInf.Informer(), nsInf.Informer(), npInf.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, fmt.Errorf("netpol: %w", err)
		}
		c.synced = append(c.synced, inf.HasSynced)
	}
	c.pods, c.namespaces, c.policies = podInf.Lister(), nsInf.Lister(), npInf.Lister()
	return c, nil
}

// trimPod drops the parts of a Pod the rules do not use.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	t := &corev1.Pod{}
	t.Name, t.Namespace, t.UID, t.Labels, t.ResourceVersion = p.Name, p.Namespace, p.UID, p.Labels, p.ResourceVersion
	t.Spec.NodeName, t.Spec.HostNetwork = p.Spec.NodeName, p.Spec.HostNetwork
	for _, c := range p.Spec.Containers {
		if len(c.Ports) > 0 {
			t.Spec.Containers = append(t.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
		}
	}
	t.Status.Phase, t.Status.PodIP, t.Status.PodIPs = p.Status.Phase, p.Status.PodIP, p.Status.PodIPs
	return t, nil
}

// Run syncs the table until ctx ends. It returns an error only when the
// informers never sync; a failed rebuild is retried with backoff.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	defer c.queue.ShutDown()
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("netpol: caches did not sync: %w", ctx.Err())
	}
	logger.Info("Enforcing NetworkPolicy on this node's pods", "node", c.opts.NodeName, "table", "inet "+TableName)
	go func() {
		t := time.NewTicker(c.opts.ResyncPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				c.queue.ShutDown()
				return
			case <-t.C:
				c.queue.Add(syncKey)
			}
		}
	}()
	c.queue.Add(syncKey)
	for c.next(ctx) {
	}
	return nil
}

// next handles one queue item; false once the queue is shut down.
func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	// Rate limit: changes that arrive meanwhile coalesce into this run.
	if wait := time.Until(c.lastRun.Add(c.opts.MinSyncInterval)); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	err := c.sync(ctx)
	c.lastRun = time.Now()
	c.syncs.Add(1)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Writing the network policy table; retrying")
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	c.firstSyncOnce.Do(func() { close(c.firstSync) })
	return true
}

// Synced is closed once the table has been written (or found current) for
// the first time: the node's pods are then under their policies.
func (c *Controller) Synced() <-chan struct{} { return c.firstSync }

// sync rebuilds the table if the rules changed or the table is gone.
func (c *Controller) sync(ctx context.Context) error {
	rs, err := c.desired()
	if err != nil {
		return err
	}
	fp := rs.fingerprint()
	if fp == c.written {
		present, err := c.tablePresent(ctx)
		if err != nil {
			return err
		}
		if present {
			return nil
		}
		klog.FromContext(ctx).Info("The network policy table was removed from outside; writing it again", "table", "inet "+TableName)
	}
	tx := c.nft.NewTransaction()
	rs.transaction(tx)
	c.writes.Add(1)
	begin := time.Now()
	if err := c.nft.Run(ctx, tx); err != nil {
		c.written = ""
		return fmt.Errorf("nft transaction: %w", err)
	}
	c.written = fp
	klog.FromContext(ctx).V(2).Info("Wrote the network policy table", "selectedPods", rs.selected,
		"chains", len(rs.chains), "duration", time.Since(begin).Round(time.Millisecond))
	return nil
}

// tablePresent lists the table's chains: a missing table is NotFound.
func (c *Controller) tablePresent(ctx context.Context) (bool, error) {
	_, err := c.nft.List(ctx, "chain")
	switch {
	case err == nil:
		return true, nil
	case knftables.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("listing table inet %s: %w", TableName, err)
	}
}

// desired computes the table from the informers' caches.
func (c *Controller) desired() (ruleset, error) {
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return ruleset{}, err
	}
	nss, err := c.namespaces.List(labels.Everything())
	if err != nil {
		return ruleset{}, err
	}
	nps, err := c.policies.List(labels.Everything())
	if err != nil {
		return ruleset{}, err
	}
	s := snapshot{node: c.opts.NodeName, pods: pods, policies: nps, namespaces: map[string]labels.Set{}}
	for _, ns := range nss {
		s.namespaces[ns.Name] = labels.Set(ns.Labels)
	}
	return build(s), nil
}

// Cleanup deletes the table if it is there, for a node on which network
// policy was turned off after it had been on: left behind, the table
// would go on enforcing the policies of the day it was last written.
func Cleanup(ctx context.Context, nft knftables.Interface) error {
	if nft == nil {
		var err error
		if nft, err = knftables.New(knftables.InetFamily, TableName); err != nil {
			return nil // no nftables: there is no table either
		}
	}
	tx := nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("deleting table inet %s: %w", TableName, err)
	}
	return nil
}
