// Package csrapprover decides the CertificateSigningRequests that
// upstream's csrapproving controller must not or does not: kubelet serving
// certificates (signer kubernetes.io/kubelet-serving), which upstream
// leaves pending, and the client certificates nodes ask for with a node
// token (signer kubernetes.io/kube-apiserver-client-kubelet), which
// upstream would approve for any node name (see client.go).
//
// A serving request is approved when its node asks for a certificate of
// its own addresses and of nothing that names the API server or another
// node (policy.go); a node token's client request is approved when its key
// is the one bound to the node name at the node's first join
// (pkg/nodeidentity). Every other is denied, with a condition that says
// which field or name is at fault and what to do.
//
// The signing itself is the controller-manager's csrsigning controller's.
// The approver needs an identity allowed to approve for both signers: see
// ClusterRole and EnsureRBAC.
package csrapprover

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
)

// DefaultNodeWait is how long a request waits for its Node to exist and
// have addresses before it is denied. The kubelet registers its Node, with
// addresses, before it asks for a serving certificate; a request older than
// this whose Node is still not there will not become valid.
const DefaultNodeWait = 2 * time.Minute

// Options tune the controller. APIServer is required; the rest may be zero.
type Options struct {
	// NodeWait is how long a request may wait for its Node (0:
	// DefaultNodeWait), counted from the request's creation.
	NodeWait time.Duration
	// Resync re-lists requests this often (0: never), as a safety net.
	Resync time.Duration
	// APIServer is what names the API server, which no node's serving
	// certificate may name.
	APIServer APIServer
	// Informers, when set, is the shared informer factory it reads Nodes
	// from (the API server's, chain.Server.Informers; it only looks Nodes
	// up, with no handler), started with the controller and left running
	// when it stops; else it lists and watches Nodes with client.
	Informers informers.SharedInformerFactory
}

// Controller decides kubelet serving certificate requests and node
// client certificate requests made with a node token.
type Controller struct {
	client    kubernetes.Interface
	factories []informers.SharedInformerFactory
	// shared are factories others read too: started, never shut down.
	shared    []informers.SharedInformerFactory
	serving   certlisters.CertificateSigningRequestLister
	clients   certlisters.CertificateSigningRequestLister
	nodes     corelisters.NodeLister
	endpoints discoverylisters.EndpointSliceLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	nodeWait  time.Duration
	apiServer APIServer
	now       func() time.Time

	runOnce sync.Once
}

// New builds the controller. client's identity must have ClusterRole and
// the Role RecordsRole (EnsureRBAC binds them): list and watch
// CertificateSigningRequests, Nodes (unless read from Options.Informers)
// and the kubernetes Service's EndpointSlices, update
// certificatesigningrequests/approval, approve for the signers
// kubernetes.io/kubelet-serving and
// kubernetes.io/kube-apiserver-client-kubelet, and get and create the
// node identity records in kube-system.
func New(client kubernetes.Interface, o Options) (*Controller, error) {
	if client == nil {
		return nil, errors.New("csrapprover: no API client")
	}
	if o.NodeWait < 0 || o.Resync < 0 {
		return nil, fmt.Errorf("csrapprover: NodeWait %s and Resync %s must not be negative", o.NodeWait, o.Resync)
	}
	if errs := o.APIServer.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if o.NodeWait == 0 {
		o.NodeWait = DefaultNodeWait
	}
	// Only the two signers' requests: the API server filters CSRs by
	// spec.signerName, one signer per watch.
	bySigner := func(signer string) informers.SharedInformerFactory {
		return informers.NewSharedInformerFactoryWithOptions(client, o.Resync,
			informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
				lo.FieldSelector = fields.OneTermEqualSelector("spec.signerName", signer).String()
			}))
	}
	servingFactory := bySigner(certificatesv1.KubeletServingSignerName)
	clientFactory := bySigner(certificatesv1.KubeAPIServerClientKubeletSignerName)
	factories := []informers.SharedInformerFactory{servingFactory, clientFactory}
	var shared []informers.SharedInformerFactory
	nodeFactory := o.Informers
	if nodeFactory == nil {
		nodeFactory = informers.NewSharedInformerFactory(client, o.Resync)
		factories = append(factories, nodeFactory)
	} else {
		shared = append(shared, nodeFactory)
	}
	// Every API server's address: the kubernetes Service's EndpointSlices.
	endpointFactory := informers.NewSharedInformerFactoryWithOptions(client, o.Resync,
		informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: "kubernetes"}).String()
		}))
	servingInformer := servingFactory.Certificates().V1().CertificateSigningRequests()
	clientInformer := clientFactory.Certificates().V1().CertificateSigningRequests()
	nodeInformer := nodeFactory.Core().V1().Nodes()
	endpointInformer := endpointFactory.Discovery().V1().EndpointSlices()
	c := &Controller{
		client:    client,
		factories: append(factories, endpointFactory),
		shared:    shared,
		serving:   servingInformer.Lister(),
		clients:   clientInformer.Lister(),
		nodes:     nodeInformer.Lister(),
		endpoints: endpointInformer.Lister(),
		synced: []cache.InformerSynced{servingInformer.Informer().HasSynced, clientInformer.Informer().HasSynced,
			nodeInformer.Informer().HasSynced, endpointInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				// Retries of one request: 0.5 s doubling to 10 s, so a
				// request waiting for its Node is looked at every 10 s.
				workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, 10*time.Second),
				&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
			),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "edgeplane-csr-approver"},
		),
		nodeWait:  o.NodeWait,
		apiServer: o.APIServer,
		now:       time.Now,
	}
	for _, inf := range []cache.SharedIndexInformer{servingInformer.Informer(), clientInformer.Informer()} {
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueue,
			UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		})
		if err != nil {
			return nil, fmt.Errorf("csrapprover: watch requests: %w", err)
		}
	}
	// Listed for their addresses only: no handler.
	nodeInformer.Informer()
	endpointInformer.Informer()
	return c, nil
}

// enqueue queues a request the approver may have to act on: an undecided
// serving or node token request, or an enrollment that was not refused.
func (c *Controller) enqueue(obj any) {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	if !ok || !c.concerns(csr) {
		return
	}
	c.queue.Add(csr.Name)
}

// concerns reports whether csr is one the approver acts on now.
func (c *Controller) concerns(csr *certificatesv1.CertificateSigningRequest) bool {
	switch {
	case csr.Spec.SignerName == certificatesv1.KubeletServingSignerName:
		return !decided(csr)
	case ClassifyClient(csr) == TokenRequest:
		return !decided(csr)
	case ClassifyClient(csr) == EnrollRequest:
		// Upstream's selfnodeclient approval may come first: the record
		// is made whether or not the request is approved yet.
		return !refused(csr)
	}
	return false
}

// Run decides requests with workers goroutines until ctx ends, then
// returns once they have stopped. It runs once: a second call returns at
// once.
func (c *Controller) Run(ctx context.Context, workers int) {
	ran := false
	c.runOnce.Do(func() { ran = true; c.run(ctx, workers) })
	if !ran {
		klog.FromContext(ctx).Error(nil, "The CSR approver was started twice; the second run does nothing")
	}
}

func (c *Controller) run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)
	if workers < 1 {
		workers = 1
	}
	logger.V(1).Info("Starting the CSR approver", "workers", workers, "nodeWait", c.nodeWait)
	var wg sync.WaitGroup
	defer func() {
		c.queue.ShutDown()
		for _, f := range c.factories {
			f.Shutdown()
		}
		wg.Wait()
		logger.V(1).Info("Stopped the CSR approver")
	}()
	for _, f := range append(c.factories, c.shared...) {
		f.Start(ctx.Done())
	}
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return
	}
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	<-ctx.Done()
}

func (c *Controller) worker(ctx context.Context) {
	for c.next(ctx) {
	}
}

// next decides one request; false when the queue is shut down.
func (c *Controller) next(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	retryIn, err := c.sync(ctx, name)
	switch {
	case err != nil:
		utilruntime.HandleErrorWithContext(ctx, err, "Deciding a certificate signing request failed; retrying", "csr", name)
		c.queue.AddRateLimited(name)
	case retryIn > 0:
		// Look again after the backoff, and at the deadline at the
		// latest (the queue holds a name once: whichever comes first).
		c.queue.AddRateLimited(name)
		c.queue.AddAfter(name, retryIn)
	default:
		c.queue.Forget(name)
	}
	return true
}

// sync decides the request name. A serving request whose Node is not there
// yet is left pending: retryIn is then how long until it is denied for
// that.
func (c *Controller) sync(ctx context.Context, name string) (retryIn time.Duration, err error) {
	csr, err := c.serving.Get(name)
	if apierrors.IsNotFound(err) {
		csr, err = c.clients.Get(name)
	}
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if !c.concerns(csr) {
		return 0, nil
	}
	if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName {
		return c.syncServing(ctx, csr)
	}
	return 0, c.syncClient(ctx, csr)
}

// syncServing decides a kubelet serving request.
func (c *Controller) syncServing(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	var node *corev1.Node
	if nodeName := requesterNode(csr); nodeName != "" {
		var err error
		node, err = c.nodes.Get(nodeName)
		switch {
		case apierrors.IsNotFound(err):
			node = nil
		case err != nil:
			return 0, fmt.Errorf("node %s: %w", nodeName, err)
		}
	}
	reserved, err := c.reserved()
	if err != nil {
		return 0, err
	}
	d := Decide(csr, node, reserved)
	if d.Verdict == WaitForNode {
		age := c.now().Sub(csr.CreationTimestamp.Time)
		if age < c.nodeWait {
			logger.V(2).Info("A kubelet serving certificate request waits for its node", "csr", csr.Name, "node", d.Node,
				"reason", d.Reason, "waited", age.Round(time.Second), "until", c.nodeWait)
			return c.nodeWait - age, nil
		}
		d.Verdict = Deny
		d.Message = fmt.Sprintf("edgeplane denied this kubelet serving certificate: %s, %s after the request (it waits %s)",
			d.Message, age.Round(time.Second), c.nodeWait)
	}
	if err := c.setCondition(ctx, csr, d.Verdict == Approve, d.Reason, d.Message); err != nil {
		return 0, err
	}
	logger.Info("Decided a kubelet serving certificate request", "csr", csr.Name, "node", d.Node,
		"decision", d.Verdict.String(), "reason", d.Reason, "message", d.Message)
	return 0, nil
}

// reserved is what no node's serving certificate may name, from the
// listers.
func (c *Controller) reserved() (Reserved, error) {
	r := Reserved{APIServer: c.apiServer}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return Reserved{}, fmt.Errorf("list nodes: %w", err)
	}
	r.Nodes = nodes
	eps, err := c.endpoints.EndpointSlices(metav1.NamespaceDefault).List(labels.Everything())
	if err != nil {
		return Reserved{}, fmt.Errorf("list the kubernetes Service's EndpointSlices: %w", err)
	}
	for _, s := range eps {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if ip := net.ParseIP(a); ip != nil {
					r.Endpoints = append(r.Endpoints, ip)
				}
			}
		}
	}
	return r, nil
}

// syncClient decides a node token's client request, or records an
// enrolling node's identity.
func (c *Controller) syncClient(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) error {
	logger := klog.FromContext(ctx)
	var st NodeState
	if node := ClientNode(csr); node != "" {
		var err error
		if st, err = c.nodeState(ctx, node); err != nil {
			return err
		}
	}
	d := DecideClient(csr, st)
	switch d.Verdict {
	case Leave:
		logger.V(2).Info("Left a node client certificate request alone", "csr", csr.Name, "node", d.Node, "reason", d.Reason, "message", d.Message)
		return nil
	case BindOnly, BindThenApprove:
		held, bound, err := nodeidentity.Bind(ctx, c.client, nodeidentity.Record{Node: d.Node, Fingerprint: d.Fingerprint, BoundBy: d.BoundBy, BoundAt: c.now()})
		if err != nil {
			return fmt.Errorf("bind node %s's identity: %w", d.Node, err)
		}
		if bound {
			logger.Info("Bound a node name to its identity key", "node", d.Node, "fingerprint", d.Fingerprint, "boundBy", d.BoundBy, "csr", csr.Name)
		}
		if d.Verdict == BindOnly {
			if !bound {
				logger.Info("Did not enroll a node: another request bound its identity first", "node", d.Node, "csr", csr.Name, "boundBy", held.BoundBy)
			}
			return nil
		}
		if !bound {
			// Another request bound the name first: judge this one
			// against that record.
			d = DecideClient(csr, NodeState{Record: held, HasRecord: true})
		}
	}
	if err := c.setCondition(ctx, csr, d.Verdict != DenyClient, d.Reason, d.Message); err != nil {
		return err
	}
	logger.Info("Decided a node client certificate request", "csr", csr.Name, "node", d.Node, "requester", csr.Spec.Username,
		"decision", d.Verdict.String(), "reason", d.Reason, "message", d.Message)
	return nil
}

// nodeState reads node's identity record and its Node from the API server,
// not from a cache: whether a name is taken decides who becomes that node.
func (c *Controller) nodeState(ctx context.Context, node string) (NodeState, error) {
	var st NodeState
	var err error
	st.Record, st.HasRecord, err = nodeidentity.Get(ctx, c.client, node)
	if err != nil {
		return NodeState{}, err
	}
	n, err := c.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return NodeState{}, fmt.Errorf("get node %s: %w", node, err)
	default:
		st.NodeCreated = n.CreationTimestamp.Time
	}
	return st, nil
}

// setCondition writes the Approved or Denied condition through the
// approval subresource.
func (c *Controller) setCondition(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, approve bool, reason, message string) error {
	typ := certificatesv1.CertificateApproved
	if !approve {
		typ = certificatesv1.CertificateDenied
	}
	csr = csr.DeepCopy()
	now := metav1.NewTime(c.now())
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: message,
		LastUpdateTime: now, LastTransitionTime: now,
	})
	_, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil // deleted meanwhile: nothing to decide
	case apierrors.IsForbidden(err):
		return fmt.Errorf("not allowed to set %s on CSR %s (bind this identity to the ClusterRole %s, see csrapprover.EnsureRBAC): %w", typ, csr.Name, ClusterRoleName, err)
	case err != nil:
		return fmt.Errorf("set %s on CSR %s: %w", typ, csr.Name, err)
	}
	return nil
}

// requesterNode is the requester's node name, "" when the requester is
// not a node.
func requesterNode(csr *certificatesv1.CertificateSigningRequest) string {
	if name, ok := strings.CutPrefix(csr.Spec.Username, nodeUserPrefix); ok {
		return name
	}
	return ""
}

// decided: approved or denied already (a Failed request is left alone too).
func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			return true
		}
	}
	return false
}

// refused: denied or failed.
func refused(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			return true
		}
	}
	return false
}
