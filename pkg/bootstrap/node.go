package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/apiendpoint"
	"github.com/edgeplane/edgeplane/pkg/containerd"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
	"github.com/edgeplane/edgeplane/pkg/kubelet"
	"github.com/edgeplane/edgeplane/pkg/kubeproxy"
	"github.com/edgeplane/edgeplane/pkg/node"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// startupRetry bounds the retries of transient API errors in start-up
// steps: the API server may still be settling when they run.
const startupRetry = time.Minute

// publishNodeConfig tells joining nodes the client CA of the API server's
// kubelet client certificate and the cluster DNS settings.
func (s *server) publishNodeConfig(ctx context.Context, o CompletedOptions) error {
	client, err := s.adminClient("node-config")
	if err != nil {
		return err
	}
	ca, err := readFile(s.pki.ClientCA.Cert)
	if err != nil {
		return err
	}
	nc := o.nodeSettings()
	nc.ClientCA = ca
	if nc.KubeletServingCA, err = readFile(s.pki.KubeletServingCA.Cert); err != nil {
		return err
	}
	if err := kubeclient.Retry(ctx, "publishing the node settings", startupRetry, func(ctx context.Context) error {
		return nodeconfig.Publish(ctx, client, nc)
	}); err != nil {
		return err
	}
	if err := kubeclient.Retry(ctx, "letting nodes learn the API servers", startupRetry, func(ctx context.Context) error {
		return apiendpoint.EnsureRBAC(ctx, client)
	}); err != nil {
		return err
	}
	if o.Network.KubeProxyMode == "" {
		return nil
	}
	return kubeclient.Retry(ctx, "letting nodes run kube-proxy", startupRetry, func(ctx context.Context) error {
		return kubeproxy.EnsureRBAC(ctx, client)
	})
}

// nodeSettings are the cluster's settings for nodes (published to agents,
// and the server's own node's), but for the client CA.
func (o CompletedOptions) nodeSettings() nodeconfig.Config {
	return nodeconfig.Config{
		ClusterDomain: o.ClusterDomain, ClusterDNS: []net.IP{o.ClusterDNS},
		ClusterCIDR: o.ClusterCIDR, FlannelBackend: o.Network.FlannelBackend, KubeProxyMode: o.Network.KubeProxyMode,
		NodeLeaseDuration: nodeconfig.LeaseDuration(o.NodeHeartbeat),
		AllowPrivileged:   o.AllowPrivileged,
		LocalStoragePath:  o.localStoragePath(),
	}
}

// startNode makes the server its own node when a container runtime is there,
// as a k3s server is: the node (pkg/node) runs in this process with
// credentials minted from the server's CAs (no token). It starts in the
// background: the server is ready without waiting for its node, and a node
// part that ends takes the server down, as the kubelet's end always did.
// With no runtime it logs how to add one and the server stays a control
// plane.
func (s *server) startNode(ctx context.Context, o CompletedOptions, port int) error {
	logger := klog.FromContext(ctx)
	if o.Disabled[node.PartKubelet] {
		logger.V(1).Info("The kubelet is disabled: this server is a control plane only")
		return nil
	}
	choice := node.ChooseRuntime(ctx, o.Node.RuntimeEndpoint)
	var (
		rt      *criruntime.Runtime
		runtime string
	)
	if choice.Managed != nil {
		runtime = "containerd " + choice.Managed.Version + ", run by edgeplane"
	} else {
		var err error
		rt, err = node.DetectRuntime(ctx, o.Node.RuntimeEndpoint)
		switch {
		case err == nil:
		case o.Node.RuntimeEndpoint == "" && errors.Is(err, criruntime.ErrNoRuntime):
			logger.Info("No container runtime found: this server is a control plane only; install one (apt-get install containerd) and restart to make it a node too, or pass --disable=kubelet to silence this", "detail", err.Error(), "why", choice.Why)
			return nil
		case o.Node.RuntimeEndpoint == "":
			logger.Error(err, "The container runtime does not answer: this server stays a control plane only until it is restarted with a working runtime")
			return nil
		default:
			return fmt.Errorf("--container-runtime-endpoint: %w", err)
		}
		runtime = rt.Name + " " + rt.Version
	}
	if err := o.nodeReachesAPI(runtime); err != nil {
		return err
	}
	logger.Info("The node's container runtime", "runtime", runtime, "why", choice.Why)
	admin, err := s.adminClient("node-identity")
	if err != nil {
		return err
	}
	// The node's address, as its kubelet reports it and its serving
	// certificate names it.
	settings, err := o.Node.WithDefaultIP()
	if err != nil {
		return err
	}
	dir := filepath.Join(o.DataDir, node.DirName)
	var managed *containerd.Containerd
	if choice.Managed != nil {
		if managed, err = node.NewManagedContainerd(ctx, settings, node.PathsIn(dir), choice.Managed); err != nil {
			return err
		}
	}
	n, err := node.New(node.Config{
		Settings: settings,
		Dir:      dir,
		Runtime:  rt,
		Managed:  managed,
		Credentials: &node.LocalCA{
			PKI: s.pki, Server: localServerURL(o.BindAddress, port), Admin: admin, IPs: settings.IPs,
			Settings: o.nodeSettings(), Network: o.Network,
		},
		Disabled: o.Disabled,
		InServer: true,
	})
	if err != nil {
		return err
	}
	if err := s.mgr.StartBackground(ctx, n); err != nil {
		return err
	}
	s.nodeIPs = settings.IPs
	logger.Info("This server is a node too", "node", o.Node.Name, "runtime", n.Runtime().Name+" "+n.Runtime().Version,
		"duration", time.Since(n.Began()).Round(time.Millisecond))
	return s.mgr.StartBackground(ctx, background.NewTask("node-ready", func(taskCtx context.Context) {
		if err := n.Ready(taskCtx); err == nil {
			logger.Info(fmt.Sprintf("Node %s is Ready in %.1f s", o.Node.Name, time.Since(n.Began()).Seconds()))
		} else if taskCtx.Err() == nil {
			logger.Error(err, "The node did not become ready", "node", o.Node.Name)
		}
	}))
}

// localServerURL is how a component of this process reaches the API: the
// bind address, or loopback when it listens on every address.
func localServerURL(bind net.IP, port int) string {
	return "https://" + net.JoinHostPort(localServerHost(bind).String(), strconv.Itoa(port))
}

// localServerHost is the host part of localServerURL.
func localServerHost(bind net.IP) net.IP {
	switch {
	case bind == nil || bind.Equal(net.IPv4zero):
		return net.IPv4(127, 0, 0, 1)
	case bind.Equal(net.IPv6unspecified):
		return net.IPv6loopback
	}
	return bind
}

// adminClient is a client of this server as its admin, for the start-up
// step named part.
func (s *server) adminClient(part string) (kubernetes.Interface, error) {
	return kubeclient.New(s.pki.AdminKubeconfig, part, kubeclient.Burst)
}

func readFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, unwrapPath(err))
	}
	return b, nil
}

// validateNodeDir reports a node directory the kubelet cannot use.
func validateNodeDir(dataDir string) error {
	return kubelet.ValidateRootDir(node.PathsIn(filepath.Join(dataDir, node.DirName)).RootDir, "--data-dir")
}
