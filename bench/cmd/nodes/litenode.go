package main

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
	"k8s.io/utils/clock"

	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// The kubelet's defaults (KubeletConfiguration v1beta1, k8s.io/kubernetes
// v1.37.2): a Lease of 40 s renewed every 10 s (a quarter of it), node
// status computed every 10 s and sent when it changed or every 5 minutes,
// the heartbeat client's timeout the smaller of the status period and the
// lease duration, 50 QPS / burst 100 for the main client.
const (
	liteLeaseSeconds     = 40
	liteRenewInterval    = liteLeaseSeconds * time.Second / 4
	liteStatusPeriod     = 10 * time.Second
	liteStatusReport     = 5 * time.Minute
	liteHeartbeatTimeout = 10 * time.Second
	liteStatusRetries    = 5 // the kubelet's nodeStatusUpdateRetry
	liteQPS, liteBurst   = 50, 100
	liteUserAgent        = "lite-kubelet"
	// A lite node's join is started again at most this often (as hollow
	// nodes' join: a join times out on a loaded host).
	liteJoinAttempts = 5
)

// liteNode is a node without kubelet code: it joins with the node token
// and its own client certificate, registers its Node, renews its Lease,
// reports its status and runs the pods scheduled to it as the kubelet's
// API traffic does at default settings, over one TLS connection of its own.
type liteNode struct {
	r      *liteRunner
	index  int
	name   string
	ip     netip.Addr // InternalIP, in 198.18.0.0/15 (RFC 2544 benchmarking): nothing connects to it
	ctx    context.Context
	cancel context.CancelFunc
	dialer *connrotation.Dialer // every connection of the node, closed by kill

	core      corev1client.CoreV1Interface // main client (pods, registration, watches)
	hb        *nodeClientset               // heartbeat client: Lease and node status
	nodeStore cache.Store                  // the node's own Node, as the kubelet's node informer
	pods      *podTracker

	// leaseSeconds is the node Lease's duration: the cluster's (the
	// server's --node-heartbeat, from its node settings), as an agent's
	// kubelet takes it; renewed every quarter of it.
	leaseSeconds int32

	// The status loop's state (its goroutine only).
	lastReport  time.Time
	reportDelay time.Duration
}

func liteNodeName(prefix string, i int) string { return fmt.Sprintf("%s-%d", prefix, i) }

// liteNodeIP is node i's InternalIP: 198.18.0.0/15 holds 131072 of them.
func liteNodeIP(i int) netip.Addr {
	v := uint32(198)<<24 | uint32(18)<<16 + uint32(i%(1<<17-2)) + 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func newLiteNode(ctx context.Context, r *liteRunner, index int) *liteNode {
	ctx, cancel := context.WithCancel(ctx)
	n := &liteNode{r: r, index: index, name: liteNodeName(r.cfg.Prefix, index), ip: liteNodeIP(index), ctx: ctx, cancel: cancel,
		dialer: connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)}
	n.pods = &podTracker{n: n, pods: map[string]*litePod{}, wake: make(chan struct{}, 1)}
	return n
}

// kill stops everything the node does at once: its context, then its
// connections (requests in flight fail).
func (n *liteNode) kill() {
	n.cancel()
	n.dialer.CloseAll()
}

// start joins, registers the Node and starts the node's loops.
func (n *liteNode) start() error {
	cert, key, err := n.join()
	if err != nil {
		return err
	}
	if err := n.clients(cert, key); err != nil {
		return err
	}
	if err := n.register(); err != nil {
		return err
	}
	ctx := n.ctx
	logger := klog.FromContext(ctx).WithValues("node", n.name)
	ctx = klog.NewContext(ctx, logger)
	// The kubelet's node informer (metadata.name=<node>) and its pod
	// source (spec.nodeName=<node>), both on the main client.
	n.nodeStore = cache.NewStore(cache.MetaNamespaceKeyFunc)
	nodeLW := cache.NewListWatchFromClient(n.core.RESTClient(), "nodes", metav1.NamespaceAll, fields.OneTermEqualSelector(metav1.ObjectNameField, n.name))
	go cache.NewReflectorWithOptions(nodeLW, &corev1.Node{}, n.nodeStore, cache.ReflectorOptions{Name: "node/" + n.name, Logger: &logger}).RunWithContext(ctx)
	podLW := cache.NewListWatchFromClient(n.core.RESTClient(), "pods", metav1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", n.name))
	go cache.NewReflectorWithOptions(podLW, &corev1.Pod{}, n.pods, cache.ReflectorOptions{Name: "pods/" + n.name, Logger: &logger}).RunWithContext(ctx)
	go n.pods.run(ctx)
	// The kubelet's lease controller itself (k8s.io/component-helpers),
	// with the kubelet's owner reference to the Node, and what the kubelet
	// does on repeated heartbeat failures when it rotates its certificate
	// (as edgeplane's agents do, pkg/kubelet): close all its connections.
	renew := time.Duration(n.leaseSeconds) * time.Second / 4
	lc := lease.NewController(clock.RealClock{}, n.hb, n.name, n.leaseSeconds, n.dialer.CloseAll, renew,
		n.name, corev1.NamespaceNodeLease, kubeletutil.SetNodeOwnerFunc(ctx, n.hb, n.name))
	go lc.Run(ctx)
	// The kubelet's status loop: every 10 s with 4% jitter, sliding.
	go wait.JitterUntilWithContext(ctx, n.syncStatus, liteStatusPeriod, 0.04, true)
	return nil
}

// join gets the node's client certificate as `edgeplane agent` and the
// kubelet's TLS bootstrap do, started again on failure (liteJoinAttempts
// in 4 minutes, with backoff). The key is made once, as the kubelet keeps
// its key across attempts.
func (n *liteNode) join() (certPEM, keyPEM []byte, err error) {
	keyPEM, err = keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(n.ctx, 4*time.Minute)
	defer cancel()
	delay := 2 * time.Second
	for attempt := 1; attempt <= liteJoinAttempts; attempt++ {
		if certPEM, err = n.requestCert(ctx, keyPEM); err == nil {
			return certPEM, keyPEM, nil
		}
		err = fmt.Errorf("lite node %s: join (attempt %d): %w", n.name, attempt, err)
		klog.FromContext(ctx).Info("Join failed, starting it again", "node", n.name, "err", err.Error(), "after", delay)
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(delay):
		}
		delay *= 2
	}
	return nil, nil, err
}

// requestCert: what a node's join asks with the bootstrap token (the
// cluster's node settings, and here also whether the name is taken), then
// a client certificate CSR as the kubelet's
// (k8s.io/kubernetes pkg/kubelet/certificate/bootstrap): subject
// system:node:<name> in system:nodes, signer
// kubernetes.io/kube-apiserver-client-kubelet, which the server approves.
func (n *liteNode) requestCert(ctx context.Context, keyPEM []byte) ([]byte, error) {
	boot := n.r.boot
	if _, err := boot.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("checking the node name: %w", err)
	}
	nc, err := nodeconfig.Fetch(ctx, boot)
	if err != nil {
		return nil, fmt.Errorf("the cluster's node settings: %w", err)
	}
	n.leaseSeconds = leaseSeconds(nc, liteLeaseSeconds)
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	subject := &pkix.Name{Organization: []string{"system:nodes"}, CommonName: "system:node:" + n.name}
	csrPEM, err := certutil.MakeCSR(key, subject, nil, nil)
	if err != nil {
		return nil, err
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	name, err := csrName(key)
	if err != nil {
		return nil, err
	}
	reqName, reqUID, err := csr.RequestCertificateWithContext(ctx, boot, csrPEM, name, certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, key)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return csr.WaitForCertificate(wctx, boot, reqName, reqUID)
}

// csrName is fixed per key, so that a join started again finds its
// request (the kubelet names it by a digest of key, subject and usages).
func csrName(key any) (string, error) {
	signer, ok := key.(crypto.Signer)
	if !ok {
		return "", errors.New("the key cannot sign")
	}
	der, err := x509.MarshalPKIXPublicKey(signer.Public())
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return "node-csr-" + base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// nodeClientset is the part of kubernetes.Interface a lite node uses; any
// other group panics (nil). Typed clients of two groups instead of a whole
// clientset of ~50 keep a node small.
type nodeClientset struct {
	kubernetes.Interface
	core  corev1client.CoreV1Interface
	coord coordinationv1client.CoordinationV1Interface
}

func (c *nodeClientset) CoreV1() corev1client.CoreV1Interface { return c.core }
func (c *nodeClientset) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return c.coord
}

// clients builds the node's main and heartbeat clients over one transport
// with the node's certificate and dialer: one TLS connection (HTTP/2), as
// the kubelet's two clients share one.
func (n *liteNode) clients(certPEM, keyPEM []byte) error {
	cfg := &rest.Config{
		Host:            n.r.cfg.Server,
		TLSClientConfig: rest.TLSClientConfig{CAData: n.r.caPEM, CertData: certPEM, KeyData: keyPEM},
		ContentConfig: rest.ContentConfig{
			ContentType:        "application/vnd.kubernetes.protobuf",
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json",
		},
		UserAgent: liteUserAgent,
		QPS:       liteQPS,
		Burst:     liteBurst,
		Dial:      n.dialer.DialContext,
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	rt := &countingTransport{next: httpClient.Transport, stats: &n.r.stats}
	httpClient.Transport = rt
	if n.core, err = corev1client.NewForConfigAndClient(cfg, httpClient); err != nil {
		return err
	}
	hbCfg := rest.CopyConfig(cfg)
	hbCfg.QPS = -1 // the kubelet's heartbeat client has no client-side limit
	hbHTTP := &http.Client{Transport: &leaseTimer{next: rt, rec: n.r.lat}, Timeout: liteHeartbeatTimeout}
	n.hb = &nodeClientset{}
	if n.hb.core, err = corev1client.NewForConfigAndClient(hbCfg, hbHTTP); err != nil {
		return err
	}
	n.hb.coord, err = coordinationv1client.NewForConfigAndClient(hbCfg, hbHTTP)
	return err
}

// register creates the Node as the kubelet's registerWithAPIServer does:
// tried again with a backoff of 100 ms doubling to 7 s, until it is there
// (here: for 4 minutes at most).
func (n *liteNode) register() error {
	step := 100 * time.Millisecond
	deadline := time.After(4 * time.Minute)
	var err error
	for {
		select {
		case <-n.ctx.Done():
			return n.ctx.Err()
		case <-deadline:
			return fmt.Errorf("lite node %s: not registered after 4 minutes: %w", n.name, err)
		case <-time.After(step):
		}
		step = min(2*step, 7*time.Second)
		_, err = n.core.Nodes().Create(n.ctx, n.initialNode(time.Now()), metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		klog.FromContext(n.ctx).Info("Unable to register node", "node", n.name, "err", err.Error())
	}
}

// leaseSeconds is the node Lease duration the cluster's node settings give
// (the server's --node-heartbeat), as an agent's kubelet takes it, or def
// when they give none.
func leaseSeconds(nc nodeconfig.Config, def int32) int32 {
	if nc.NodeLeaseDuration <= 0 {
		return def
	}
	return int32(nc.NodeLeaseDuration / time.Second)
}
