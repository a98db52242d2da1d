// Package node makes a host a node of an edgeplane cluster, for `edgeplane
// agent` and for a server that is its own node, with one list of parts:
//
//	credentials  the node's client certificate and kubeconfig, before any
//	             part starts: a token join with the node's identity key
//	             (TokenJoin), or minted by the server (LocalCA)
//	containerd   the node's own container runtime (pkg/containerd), when
//	             edgeplane runs it (ChooseRuntime): started and answering
//	             before any other part, stopped after all of them
//	api-endpoint an agent's node-local API endpoint (pkg/apiendpoint) on
//	             127.0.0.1:6444, through which the parts below reach
//	             every server (unless off)
//	api-cache    the endpoint's cache (pkg/apicache): what the parts read,
//	             kept on disk and served when no server answers (unless
//	             off)
//	images       the airgap images, imported into the runtime
//	kubelet      upstream's, in this process
//	flannel      the pod network across nodes (unless off)
//	pod-network  the node's CNI configuration
//	kube-proxy   Services (unless off)
//	network-policy  NetworkPolicy enforcement (unless off)
//	local-storage   the directories of the node's local-path volumes
//	                (when the server runs local storage)
//
// Node is one component to its caller: Start gets the credentials and
// starts every part; Ready waits until each part does its job and the Node
// is Ready; Done closes when any part ends on its own (the kubelet, a
// network whose backend failed, a policy controller that stopped), so that
// a node with a broken part ends instead of looking healthy.
package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/apiendpoint"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/containerd"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
	"github.com/edgeplane/edgeplane/pkg/kubelet"
	"github.com/edgeplane/edgeplane/pkg/localstorage"
	"github.com/edgeplane/edgeplane/pkg/netpol"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
	"github.com/edgeplane/edgeplane/pkg/nodetunnel"
)

// Config is one node.
type Config struct {
	// Settings are the node's own (its flags).
	Settings Settings
	// Dir is the node's directory, <data-dir>/agent.
	Dir string
	// Runtime is the container runtime the node runs pods with
	// (DetectRuntime); nil with Managed, whose containerd is detected once
	// it answers.
	Runtime *criruntime.Runtime
	// Managed is the node's own containerd (NewManagedContainerd), started
	// after the credentials and before every other part; nil: Runtime is
	// the host's.
	Managed *containerd.Containerd
	// Credentials give the node its client certificate and the cluster's
	// settings.
	Credentials Credentials
	// Disabled are the node's parts turned off, by PartNetworkPolicy
	// (flannel and kube-proxy follow the cluster's Network).
	Disabled map[string]bool
	// InServer: the node runs in a server's process, whose feature gates
	// the API server reads.
	InServer bool
	// APIEndpointPort is an agent's node-local API endpoint's port on
	// 127.0.0.1 (0: apiendpoint.DefaultPort).
	APIEndpointPort int
	// Tunnel is an agent's node tunnel mode (pkg/nodetunnel; "" or off:
	// none).
	Tunnel nodetunnel.Mode
}

// Cluster is what a node takes from the cluster.
type Cluster struct {
	nodeconfig.Config
	// ClientCAFile is the CA file of the clients the kubelet's API accepts.
	ClientCAFile string
	// Network is the cluster network the node runs.
	Network Network
	// ServingCertFile and ServingKeyFile are the kubelet's serving
	// certificate, minted by the server for its own node; empty: the
	// kubelet asks for one (a kubelet-serving CSR) and rotates it.
	ServingCertFile, ServingKeyFile string
	// RenewServing renews the files above when they are due (the kubelet
	// reloads them); nil with no files.
	RenewServing func(context.Context) error
	// Offline: no API server answered when the node started, and the
	// settings are the ones it kept on disk (Paths.ClusterSettings).
	Offline bool
}

// Node is a running node: a component (Start, Ready, Stop) and an Ender.
type Node struct {
	cfg   Config
	paths Paths

	mu       sync.Mutex
	parts    []component.Component
	mgr      component.Manager
	status   component.Status
	stopWait context.CancelFunc
	waited   chan struct{}
	began    time.Time
	offline  bool
}

var (
	_ component.Component = (*Node)(nil)
	_ component.Ender     = (*Node)(nil)
)

// New checks cfg; nothing starts until Start.
func New(cfg Config) (*Node, error) {
	if (cfg.Runtime == nil && cfg.Managed == nil) || cfg.Credentials == nil || cfg.Dir == "" {
		return nil, errors.New("node: a runtime, credentials and a directory are required")
	}
	p := PathsIn(cfg.Dir)
	k := cfg.KubeletOptions(p, Cluster{Config: nodeconfig.Config{ClusterDomain: "cluster.local"}, ClientCAFile: p.ClientCA})
	if errs := k.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Node{cfg: cfg, paths: p}, nil
}

// Name implements component.Component.
func (n *Node) Name() string { return "node" }

// Start gets the node's credentials, then starts its parts in order. A
// part that fails to start stops the ones started before it.
func (n *Node) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", n.cfg.Settings.Name)
	ctx = klog.NewContext(ctx, logger)
	n.began = time.Now()
	cluster, err := n.cfg.Credentials.Ensure(ctx, n.cfg.Settings.Name, n.paths)
	if err != nil {
		return err
	}
	if err := n.startManaged(ctx); err != nil {
		return err
	}
	parts, err := n.build(ctx, cluster)
	if err != nil {
		_ = n.mgr.StopAll(context.WithoutCancel(ctx), partStopTimeout)
		return err
	}
	for _, p := range parts {
		if err := n.mgr.StartBackground(ctx, p); err != nil {
			_ = n.mgr.StopAll(context.WithoutCancel(ctx), partStopTimeout)
			return err
		}
	}
	watchCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	waited := make(chan struct{})
	n.mu.Lock()
	n.parts, n.stopWait, n.waited, n.offline = parts, cancel, waited, cluster.Offline
	n.mu.Unlock()
	go func() {
		defer close(waited)
		if ended := n.mgr.Watch(watchCtx); ended != nil {
			n.status.End(ended)
		}
	}()
	return nil
}

// startManaged starts the node's own containerd, waits until it answers
// (its Ready gates the kubelet and every other part) and makes it the
// node's runtime. The manager stops it after every other part.
func (n *Node) startManaged(ctx context.Context) error {
	if n.cfg.Managed == nil {
		return nil
	}
	if err := n.mgr.Start(ctx, n.cfg.Managed, partStopTimeout); err != nil {
		return err
	}
	rt, err := DetectRuntime(ctx, n.cfg.Managed.Endpoint())
	if err != nil {
		_ = n.mgr.StopAll(context.WithoutCancel(ctx), partStopTimeout)
		return fmt.Errorf("the node's containerd: %w", err)
	}
	if cgroupDriver(rt.CgroupDriver) == "" {
		// containerd 1.6 does not say; it runs with the driver it was
		// configured with.
		rt.CgroupDriver = n.cfg.Managed.CgroupDriver()
	}
	n.mu.Lock()
	n.cfg.Runtime = rt
	n.mu.Unlock()
	return nil
}

// Runtime is the container runtime the node runs pods with; with a
// managed containerd, known once Start returned.
func (n *Node) Runtime() *criruntime.Runtime {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cfg.Runtime
}

// partStopTimeout bounds each part's Stop.
const partStopTimeout = 30 * time.Second

// build makes the node's parts for the cluster's settings.
func (n *Node) build(ctx context.Context, cluster Cluster) ([]component.Component, error) {
	s, p := n.cfg.Settings, n.paths
	var parts []component.Component
	var endpoint *apiendpoint.Endpoint
	if n.viaEndpoint() {
		// An agent's parts reach the API through the node-local
		// endpoint, which follows every server.
		ps, e, local, err := endpointParts(s.Name, p, n.cfg.APIEndpointPort, !n.cfg.Disabled[PartAPICache])
		if err != nil {
			return nil, err
		}
		parts, p, endpoint = append(parts, ps...), local, e
	}
	if tunnel, err := n.tunnel(endpoint); err != nil {
		return nil, err
	} else if tunnel != nil {
		parts = append(parts, tunnel)
	}
	k, err := kubelet.New(n.cfg.KubeletOptions(p, cluster))
	if err != nil {
		return nil, err
	}
	if cluster.ServingCertFile == "" && len(cluster.KubeletServingCA) > 0 {
		// A serving certificate from before the kubelet-serving CA (the
		// cluster CA signed it): the kubelet asks for a new one at once.
		if dropped, err := certs.DropForeignKubeletServing(ctx, p.CertDir, cluster.KubeletServingCA); err != nil {
			return nil, err
		} else if dropped {
			klog.FromContext(ctx).Info("Dropped the kubelet's serving certificate from another CA: the kubelet asks for one from the kubelet-serving CA")
		}
	}
	parts = append(parts,
		n.images(ctx),
		k,
	)
	if cluster.RenewServing != nil {
		parts = append(parts, &servingRenewer{renew: cluster.RenewServing})
	}
	network, err := networkComponents(ctx, s, p, cluster.Network, cluster.ClusterCIDR)
	if err != nil {
		return nil, err
	}
	parts = append(parts, network...)
	if n.cfg.Disabled[PartNetworkPolicy] {
		// A table an earlier run left would go on enforcing the
		// policies of the day it was written.
		if err := netpol.Cleanup(ctx, nil); err != nil {
			return nil, fmt.Errorf("node: removing the NetworkPolicy table of an earlier run: %w", err)
		}
	} else {
		parts = append(parts, &netpol.Component{Node: s.Name, Kubeconfig: p.Kubeconfig})
	}
	if cluster.LocalStoragePath != "" {
		parts = append(parts, &localstorage.Node{NodeName: s.Name, Kubeconfig: p.Kubeconfig, Path: cluster.LocalStoragePath})
	}
	return parts, nil
}

// Ready waits until every part does its job and the Node is Ready, or a
// part ends, or ctx ends.
func (n *Node) Ready(ctx context.Context) error {
	n.mu.Lock()
	parts := n.parts
	n.mu.Unlock()
	if parts == nil {
		return errors.New("node: not started")
	}
	for _, p := range parts {
		if err := n.readyOrEnded(ctx, p); err != nil {
			return fmt.Errorf("%s: %w", p.Name(), err)
		}
	}
	return n.waitNodeReady(ctx)
}

// Offline reports whether the node started from the cluster settings it
// kept on disk because no API server answered (Cluster.Offline); known
// once Start returned.
func (n *Node) Offline() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.offline
}

// LocalReady waits until the parts up to the kubelet are ready (the
// kubelet answers its health check), or a part ends, or ctx ends: what a
// node that started offline can reach before a server answers. The parts
// after it (the pod network, kube-proxy, NetworkPolicy, local storage)
// and the Node's Ready condition wait for the API; Ready waits for them.
func (n *Node) LocalReady(ctx context.Context) error {
	n.mu.Lock()
	parts := n.parts
	n.mu.Unlock()
	if parts == nil {
		return errors.New("node: not started")
	}
	for _, p := range parts {
		if err := n.readyOrEnded(ctx, p); err != nil {
			return fmt.Errorf("%s: %w", p.Name(), err)
		}
		if p.Name() == PartKubelet {
			return nil
		}
	}
	return nil
}

// readyOrEnded is p.Ready, cut short when any part of the node ends.
func (n *Node) readyOrEnded(ctx context.Context, p component.Component) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-n.status.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	err := p.Ready(ctx)
	if ended := n.status.Err(); ended != nil {
		return ended
	}
	return err
}

// viaEndpoint tells whether the node's parts reach the API through the
// node-local endpoint: an agent's do, unless it is off.
func (n *Node) viaEndpoint() bool { return !n.cfg.InServer && !n.cfg.Disabled[PartAPIEndpoint] }

// waitNodeReady polls the Node's Ready condition with the node's own
// credentials, as its parts reach the API: through the node-local
// endpoint when there is one, so that a --server that is gone while other
// servers answer does not hold the node's readiness back for good.
func (n *Node) waitNodeReady(ctx context.Context) error {
	kubeconfig := n.paths.Kubeconfig
	if n.viaEndpoint() {
		kubeconfig = n.paths.LocalKubeconfig
	}
	client, err := kubeclient.New(kubeconfig, "node", kubeclient.Steady)
	if err != nil {
		return err
	}
	return wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := n.status.Err(); err != nil {
			return false, err
		}
		node, err := client.CoreV1().Nodes().Get(ctx, n.cfg.Settings.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil // not registered yet, or the server is busy: the parts' own ends say more
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// Began is when Start was called.
func (n *Node) Began() time.Time { return n.began }

// Stop stops the parts, newest first, and returns every error.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	stopWait, waited := n.stopWait, n.waited
	n.stopWait = nil
	n.mu.Unlock()
	if stopWait != nil {
		stopWait()
		<-waited
	}
	return n.mgr.StopAll(ctx, partStopTimeout)
}

// Done is closed when a part of the node ended on its own.
func (n *Node) Done() <-chan struct{} { return n.status.Done() }

// Err says which part ended and why.
func (n *Node) Err() error { return n.status.Err() }
