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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/agent"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
	"github.com/edgeplane/edgeplane/pkg/kubelet"
	"github.com/edgeplane/edgeplane/pkg/kubeproxy"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// agentDirName is a node's directory under the data dir.
const agentDirName = "agent"

// publishNodeConfig tells joining nodes the client CA of the API server's
// kubelet client certificate and the cluster DNS settings.
func (s *server) publishNodeConfig(ctx context.Context, o CompletedOptions) error {
	client, err := adminClient(s.pki.AdminKubeconfig)
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
	if err := retryTransient(ctx, "publishing the node settings", func(ctx context.Context) error {
		return nodeconfig.Publish(ctx, client, nc)
	}); err != nil {
		return err
	}
	if o.Network.KubeProxyMode == "" {
		return nil
	}
	return retryTransient(ctx, "letting nodes run kube-proxy", func(ctx context.Context) error {
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
	}
}

// startNode makes the server its own node when a container runtime is there,
// as a k3s server is: the kubelet runs in this process with node
// credentials minted from the client CA (no token), after the airgap images
// are imported; the pod network is written once the node has a pod CIDR.
// With no runtime it logs how to add one and the server stays a control plane.
func (s *server) startNode(ctx context.Context, o CompletedOptions, port int) error {
	logger := klog.FromContext(ctx)
	if o.Disabled[componentKubelet] {
		logger.V(1).Info("The kubelet is disabled: this server is a control plane only")
		return nil
	}
	begin := time.Now()
	rt, err := criruntime.Detect(ctx, o.Node.RuntimeEndpoint)
	switch {
	case err == nil:
	case o.Node.RuntimeEndpoint == "" && errors.Is(err, criruntime.ErrNoRuntime):
		logger.Info("No container runtime found: this server is a control plane only; install one (apt-get install containerd) and restart to make it a node too, or pass --disable=kubelet to silence this", "detail", err.Error())
		return nil
	case o.Node.RuntimeEndpoint == "":
		logger.Error(err, "The container runtime does not answer: this server stays a control plane only until it is restarted with a working runtime")
		return nil
	default:
		return fmt.Errorf("--container-runtime-endpoint: %w", err)
	}
	if err := o.nodeReachesAPI(rt.Name + " " + rt.Version); err != nil {
		return err
	}
	for _, w := range rt.Warnings {
		logger.Info("Container runtime: "+w, "runtime", rt.Name, "version", rt.Version)
	}

	paths := agent.PathsIn(filepath.Join(o.DataDir, agentDirName))
	if err := kubelet.ValidateRootDir(paths.RootDir, "--data-dir"); err != nil {
		return err
	}
	if _, err := certs.EnsureNodeClient(ctx, s.pki, o.Node.Name, paths.CertDir, paths.Kubeconfig, localServerURL(o.BindAddress, port)); err != nil {
		return err
	}
	if err := dropForeignServing(ctx, s.pki, paths.CertDir); err != nil {
		return err
	}
	kopts := o.Node.kubeletOptions(paths, rt.Endpoint, s.pki.ClientCA.Cert, o.nodeSettings())
	k, err := kubelet.New(kopts)
	if err != nil {
		return err
	}
	images := &agent.Images{Dir: paths.Images, RuntimeEndpoint: rt.Endpoint, Pinned: []string{o.Node.PauseImage}}
	network, err := nodeNetwork(ctx, o.Node, paths, o.Network, o.ClusterCIDR)
	if err != nil {
		return err
	}
	components := append([]Component{images, k}, network...)
	if np := networkPolicy(ctx, o.Disabled[componentNetworkPolicy], o.Node.Name, paths.Kubeconfig); np != nil {
		components = append(components, np)
	}
	for _, c := range components {
		if err := s.mgr.start(ctx, c, stopTimeout); err != nil {
			return err
		}
	}
	logger.Info("This server is a node too", "node", o.Node.Name, "runtime", rt.Name+" "+rt.Version,
		"duration", time.Since(begin).Round(time.Millisecond))
	return nil
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

// adminClient is a client with the admin kubeconfig.
func adminClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := adminConfig(kubeconfig, "edgeplane")
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// adminConfig is the admin kubeconfig's client config, as agent, at 50 QPS
// with a burst of 100: client-go's 5 / 10 made start-up's runs of requests
// wait (node join's last five ~150 ms of a warm restart).
func adminConfig(kubeconfig, agent string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	cfg.UserAgent = agent
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// retryTransient runs f until it succeeds, for up to a minute: the API
// server may still be settling its bootstrap roles when this runs.
func retryTransient(ctx context.Context, what string, f func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if last = f(ctx); last == nil {
			return true, nil
		}
		if apierrors.IsInvalid(last) || apierrors.IsBadRequest(last) {
			return false, last
		}
		return false, nil
	})
	if err != nil && last != nil {
		err = last
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func readFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, unwrapPath(err))
	}
	return b, nil
}
