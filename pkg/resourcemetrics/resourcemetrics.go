// Package resourcemetrics serves the resource metrics API (metrics.k8s.io/
// v1beta1: `kubectl top`, the HorizontalPodAutoscaler's CPU and memory)
// from the server's process, as upstream metrics-server does from a pod:
// the same API, the same figures, without its image.
//
// The API group is installed on the kube-apiserver when the chain is built
// (chain.APIInstaller) and served behind the aggregator through a local
// APIService (v1beta1.metrics.k8s.io with no service), so requests pass
// the chain's authentication and authorization like any built-in group's,
// and every server of a cluster answers from its own scrapes. Its Node and
// Pod listers are the API server's own caches.
//
// Every resolution (15 s, metrics-server's default) the server reads each
// node's kubelet's /metrics/resource, verifying the kubelet's serving
// certificate against the kubelet-serving CA bundle and presenting the API
// server's kubelet client certificate (the one it uses for logs and exec).
// It keeps the last two points of each node and container; a node's or a
// container's CPU is the cumulative CPU between them over their window, its
// memory the last working set. Nothing is written anywhere.
//
//	Start: create (or update) the APIService and the aggregated reader
//	       ClusterRole, start scraping; Ready: the caches have synced;
//	Stop:  stop scraping; idempotent.
package resourcemetrics

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

// Name is the part's name, for --disable as well: k3s's.
const Name = "metrics-server"

// DefaultResolution is how often kubelets are read: metrics-server's
// default, and the HorizontalPodAutoscaler's sync period.
const DefaultResolution = 15 * time.Second

// Options configure the part.
type Options struct {
	// Kubeconfig is the admin kubeconfig the APIService and the reader
	// ClusterRole are kept with.
	Kubeconfig string
	// KubeletCAFile verifies kubelets' serving certificates: the
	// kubelet-serving CA bundle.
	KubeletCAFile string
	// KubeletClientCertFile and KubeletClientKeyFile are the API server's
	// kubelet client certificate and key.
	KubeletClientCertFile, KubeletClientKeyFile string
	// AddressTypes are the Node address types to dial, in order: the API
	// server's own (--kubelet-preferred-address-types).
	AddressTypes []corev1.NodeAddressType
	// Resolution is how often kubelets are read (default DefaultResolution).
	Resolution time.Duration
	// Dial dials kubelets (optional; default: directly): the API server's
	// dialer of the cluster network, which knows node tunnels.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Server is the part: the API's storage, the scraper, and their lifecycle.
type Server struct {
	o       Options
	scraper *scraper
	store   *store
	component.Status

	mu      sync.Mutex
	nodes   corelisters.NodeLister // set by InstallAPI
	pods    corelisters.PodLister
	synced  []cache.InformerSynced
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
}

// New checks o and builds the kubelet client (the certificate files must
// exist).
func New(o Options) (*Server, error) {
	var missing []error
	for what, v := range map[string]string{"kubeconfig": o.Kubeconfig, "kubelet CA file": o.KubeletCAFile,
		"kubelet client certificate": o.KubeletClientCertFile, "kubelet client key": o.KubeletClientKeyFile} {
		if v == "" {
			missing = append(missing, fmt.Errorf("metrics-server: no %s", what))
		}
	}
	if len(o.AddressTypes) == 0 {
		missing = append(missing, errors.New("metrics-server: no node address types"))
	}
	if err := errors.Join(missing...); err != nil {
		return nil, err
	}
	if o.Resolution <= 0 {
		o.Resolution = DefaultResolution
	}
	// A kubelet that has not answered within most of a resolution is
	// skipped this round rather than delaying the next.
	sc, err := newScraper(o, o.Resolution*2/3)
	if err != nil {
		return nil, err
	}
	return &Server{o: o, scraper: sc, store: newStore(o.Resolution)}, nil
}

// Name is the component's name.
func (s *Server) Name() string { return Name }

// errNotInstalled: the chain was built without this part's API.
var errNotInstalled = errors.New("metrics-server: the API is not installed on the API server (chain.Config.APIs)")

// Start keeps the APIService and the reader ClusterRole, then starts
// scraping. It returns once the objects are written.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	synced := s.synced
	started := s.done != nil || s.stopped
	s.mu.Unlock()
	if started {
		return nil
	}
	if synced == nil {
		return errNotInstalled
	}
	logger := klog.FromContext(ctx).WithName(Name)
	ctx = klog.NewContext(ctx, logger)
	client, err := kubeclient.New(s.o.Kubeconfig, Name, kubeclient.Steady)
	if err != nil {
		return err
	}
	reg, err := apiregistrationClient(s.o.Kubeconfig)
	if err != nil {
		return err
	}
	if err := kubeclient.Retry(ctx, "keeping the metrics.k8s.io APIService", time.Minute, func(ctx context.Context) error {
		return Ensure(ctx, client, reg)
	}); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	done := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		cancel()
		return nil
	}
	s.cancel, s.done = cancel, done
	go func() {
		defer close(done)
		s.run(runCtx, synced)
	}()
	return nil
}

// Ready waits for the caches the API and the scraper read.
func (s *Server) Ready(ctx context.Context) error { return s.WaitReady(ctx) }

// Stop stops scraping and waits for the scrape in progress.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopped = true
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		s.scraper.client.CloseIdleConnections()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run scrapes every resolution until ctx ends.
func (s *Server) run(ctx context.Context, synced []cache.InformerSynced) {
	logger := klog.FromContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	s.MarkReady()
	failing := map[string]string{} // node -> its last scrape error
	ticker := time.NewTicker(s.o.Resolution)
	defer ticker.Stop()
	for {
		s.scrapeOnce(ctx, logger, failing)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// scrapeOnce reads every node and stores what they said. A node that
// starts failing (or fails differently) is logged once at info level, and
// again when it answers; repeats are at V(2), and a node that is not Ready
// (a kubelet starting or gone) logs only at V(2).
func (s *Server) scrapeOnce(ctx context.Context, logger klog.Logger, failing map[string]string) {
	nodes, err := s.nodes.List(labels.Everything())
	if err != nil { // a cache's list does not fail
		logger.Error(err, "Listing nodes")
		return
	}
	begin := time.Now()
	b, errs := s.scraper.scrapeAll(ctx, nodes, s.podNode)
	if ctx.Err() != nil {
		return
	}
	s.store.put(b)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for _, node := range nodes {
		err, was := errs[node.Name], failing[node.Name]
		switch {
		case err == nil && was != "":
			logger.Info("Reading the node's kubelet again", "node", node.Name)
			delete(failing, node.Name)
		case err != nil && err.Error() != was:
			failing[node.Name] = err.Error()
			if ready(node) || isTLSRefusal(err) {
				logger.Info("Cannot read the node's kubelet's resource metrics", "node", node.Name, "err", err.Error())
			} else {
				logger.V(2).Info("Cannot read the node's kubelet's resource metrics (node not Ready)", "node", node.Name, "err", err.Error())
			}
		case err != nil:
			logger.V(2).Info("Still cannot read the node's kubelet's resource metrics", "node", node.Name, "err", err.Error())
		}
	}
	for name := range failing {
		if !hasNode(nodes, name) {
			delete(failing, name)
		}
	}
	if logger.V(4).Enabled() {
		n, p := s.store.counts()
		logger.V(4).Info("Scraped", "nodes", len(nodes), "failed", len(errs), "nodesWithFigures", n, "podsWithFigures", p, "duration", time.Since(begin))
	}
}

// podNode is the node pod ref is bound to.
func (s *Server) podNode(ref types.NamespacedName) (string, bool) {
	pod, err := s.pods.Pods(ref.Namespace).Get(ref.Name)
	if err != nil || pod.Spec.NodeName == "" {
		return "", false
	}
	return pod.Spec.NodeName, true
}

// nodeLister and podLister are the API server's caches; the API answers
// 503 if it is asked before InstallAPI, which does not happen in a chain.
func (s *Server) nodeLister() (corelisters.NodeLister, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes == nil {
		return nil, apierrors.NewServiceUnavailable(errNotInstalled.Error())
	}
	return s.nodes, nil
}

func (s *Server) podLister() (corelisters.PodLister, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods == nil {
		return nil, apierrors.NewServiceUnavailable(errNotInstalled.Error())
	}
	return s.pods, nil
}

// isTLSRefusal reports whether err is the kubelet's serving certificate
// refused: always worth a line, Ready node or not.
func isTLSRefusal(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host)
}

func ready(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasNode(nodes []*corev1.Node, name string) bool {
	for _, n := range nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}
