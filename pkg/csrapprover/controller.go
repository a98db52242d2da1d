// Package csrapprover decides the CertificateSigningRequests of kubelet
// serving certificates (signer kubernetes.io/kubelet-serving), which
// upstream's csrapproving controller leaves pending: it approves a node's
// request for a certificate of its own addresses and denies every other,
// with a condition that says which field or name is not the node's.
//
// The signing itself is the controller-manager's csrsigning controller's.
// The approver needs an identity allowed to approve for that signer: see
// ClusterRole and EnsureRBAC.
package csrapprover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// DefaultNodeWait is how long a request waits for its Node to exist and
// have addresses before it is denied. The kubelet registers its Node, with
// addresses, before it asks for a serving certificate; a request older than
// this whose Node is still not there will not become valid.
const DefaultNodeWait = 2 * time.Minute

// Options tune the controller; the zero value works.
type Options struct {
	// NodeWait is how long a request may wait for its Node (0:
	// DefaultNodeWait), counted from the request's creation.
	NodeWait time.Duration
	// Resync re-lists requests this often (0: never), as a safety net.
	Resync time.Duration
}

// Controller approves or denies kubelet serving certificate requests.
type Controller struct {
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	lister   certlisters.CertificateSigningRequestLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	nodeWait time.Duration
	now      func() time.Time

	runOnce sync.Once
}

// New builds the controller. client's identity must be allowed to list
// and watch CertificateSigningRequests, get Nodes, update
// certificatesigningrequests/approval and approve for the signer
// kubernetes.io/kubelet-serving (ClusterRole has exactly that).
func New(client kubernetes.Interface, o Options) (*Controller, error) {
	if client == nil {
		return nil, errors.New("csrapprover: no API client")
	}
	if o.NodeWait < 0 || o.Resync < 0 {
		return nil, fmt.Errorf("csrapprover: NodeWait %s and Resync %s must not be negative", o.NodeWait, o.Resync)
	}
	if o.NodeWait == 0 {
		o.NodeWait = DefaultNodeWait
	}
	// Only this signer's requests: the API server filters CSRs by
	// spec.signerName.
	factory := informers.NewSharedInformerFactoryWithOptions(client, o.Resync,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.signerName", certificatesv1.KubeletServingSignerName).String()
		}))
	informer := factory.Certificates().V1().CertificateSigningRequests()
	c := &Controller{
		client:  client,
		factory: factory,
		lister:  informer.Lister(),
		synced:  informer.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				// Retries of one request: 0.5 s doubling to 10 s, so a
				// request waiting for its Node is looked at every 10 s.
				workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, 10*time.Second),
				&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
			),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubelet-serving-csr-approver"},
		),
		nodeWait: o.NodeWait,
		now:      time.Now,
	}
	_, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("csrapprover: watch requests: %w", err)
	}
	return c, nil
}

func (c *Controller) enqueue(obj any) {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	if !ok || csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || decided(csr) {
		return
	}
	c.queue.Add(csr.Name)
}

// Run decides requests with workers goroutines until ctx ends, then
// returns once they have stopped. It runs once: a second call returns at
// once.
func (c *Controller) Run(ctx context.Context, workers int) {
	ran := false
	c.runOnce.Do(func() { ran = true; c.run(ctx, workers) })
	if !ran {
		klog.FromContext(ctx).Error(nil, "The kubelet serving CSR approver was started twice; the second run does nothing")
	}
}

func (c *Controller) run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)
	if workers < 1 {
		workers = 1
	}
	logger.V(1).Info("Starting the kubelet serving CSR approver", "workers", workers, "nodeWait", c.nodeWait)
	var wg sync.WaitGroup
	defer func() {
		c.queue.ShutDown()
		c.factory.Shutdown()
		wg.Wait()
		logger.V(1).Info("Stopped the kubelet serving CSR approver")
	}()
	c.factory.Start(ctx.Done())
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
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
		utilruntime.HandleErrorWithContext(ctx, err, "Deciding a kubelet serving certificate request failed; retrying", "csr", name)
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

// sync decides the request name. A request whose Node is not there yet is
// left pending: retryIn is then how long until it is denied for that.
func (c *Controller) sync(ctx context.Context, name string) (retryIn time.Duration, err error) {
	logger := klog.FromContext(ctx)
	csr, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if decided(csr) || csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		return 0, nil
	}

	var node *corev1.Node
	if nodeName := requesterNode(csr); nodeName != "" {
		node, err = c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			node = nil
		case err != nil:
			return 0, fmt.Errorf("get node %s: %w", nodeName, err)
		}
	}
	d := Decide(csr, node)
	if d.Verdict == WaitForNode {
		age := c.now().Sub(csr.CreationTimestamp.Time)
		if age < c.nodeWait {
			logger.V(2).Info("A kubelet serving certificate request waits for its node", "csr", name, "node", d.Node,
				"reason", d.Reason, "waited", age.Round(time.Second), "until", c.nodeWait)
			return c.nodeWait - age, nil
		}
		d.Verdict = Deny
		d.Message = fmt.Sprintf("edgeplane denied this kubelet serving certificate: %s, %s after the request (it waits %s)",
			d.Message, age.Round(time.Second), c.nodeWait)
	}
	if err := c.setCondition(ctx, csr, d); err != nil {
		return 0, err
	}
	logger.Info("Decided a kubelet serving certificate request", "csr", name, "node", d.Node,
		"decision", d.Verdict.String(), "reason", d.Reason, "message", d.Message)
	return 0, nil
}

// setCondition writes the Approved or Denied condition through the
// approval subresource.
func (c *Controller) setCondition(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, d Decision) error {
	typ := certificatesv1.CertificateApproved
	if d.Verdict != Approve {
		typ = certificatesv1.CertificateDenied
	}
	csr = csr.DeepCopy()
	now := metav1.NewTime(c.now())
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: d.Reason, Message: d.Message,
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
