package bootstrap

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"

	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/controllers"
	"github.com/edgeplane/edgeplane/pkg/kubeadmcompat"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// nodeJoinRetry bounds the retries of transient API errors while the
// server publishes what joining nodes need: the other start-up steps'
// bound, which a slow board's first start needs (two servers starting at
// once under qemu-arm ran past 20 s).
const nodeJoinRetry = startupRetry

// startNodeJoin makes the cluster joinable by nodes, before the server says
// it is ready: kube-public/cluster-info and kubeadm's ConfigMaps and roles
// (kubeadmcompat), the CSR bindings of node bootstrap tokens (so that a
// node token works as soon as the server is ready, before the
// controller-manager's first term creates them too), and the default node
// token in <data-dir>/node-token (nodetoken.EnsureDefault says what happens
// when its Secret was deleted).
func (s *server) startNodeJoin(ctx context.Context, o CompletedOptions) error {
	logger := klog.FromContext(ctx)
	cfg, err := kubeclient.Config(s.pki.AdminKubeconfig, "node-join", kubeclient.Burst)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("node join: %w", err)
	}
	caPEM, err := os.ReadFile(s.pki.ServerCA.Cert)
	if err != nil {
		return fmt.Errorf("node join: reading the cluster CA: %w", err)
	}
	// The admin kubeconfig names the listener's port (--https-port 0 too).
	port, err := portOf(cfg.Host)
	if err != nil {
		return fmt.Errorf("node join: admin kubeconfig server %q: %w", cfg.Host, err)
	}
	// kubeadm-joined kubelets get the settings edgeplane's own nodes get:
	// the kube-dns Service's address (packaged CoreDNS, or the user's own
	// DNS at that address with --disable=coredns) and the heartbeat.
	nc := o.nodeSettings()
	compat := kubeadmcompat.Config{
		ServerURL:         nodeServerURL(o.BindAddress, o.AdvertiseAddress, port),
		CAPEM:             caPEM,
		KubernetesVersion: version.Get().GitVersion,
		ServiceCIDR:       o.ServiceCIDR.String(),
		PodCIDR:           nc.ClusterCIDR,
		ClusterDomain:     nc.ClusterDomain,
		ClusterDNS:        nc.ClusterDNS,
		NodeLeaseDuration: nc.NodeLeaseDuration,
	}
	if errs := compat.Validate(); len(errs) > 0 {
		return fmt.Errorf("node join: %v", errs)
	}
	var tok nodetoken.Token
	steps := []struct {
		what string
		run  func(context.Context) error
	}{
		{"publishing cluster-info and kubeadm's node configuration", func(ctx context.Context) error {
			return kubeadmcompat.Ensure(ctx, client, compat)
		}},
		{"creating the node bootstrap bindings", func(ctx context.Context) error {
			return controllers.EnsureNodeBootstrapRBAC(ctx, client)
		}},
		{"ensuring the default node token", func(ctx context.Context) error {
			var err error
			tok, err = nodetoken.EnsureDefault(ctx, client, o.DataDir, caPEM)
			return err
		}},
	}
	for _, st := range steps {
		if err := kubeclient.Retry(ctx, "node join: "+st.what, nodeJoinRetry, st.run); err != nil {
			return err
		}
	}
	logger.Info("Nodes can join", "server", compat.ServerURL, "tokenID", tok.ID, "tokenFile", nodetoken.FileName)
	return nil
}

// nodeServerURL is the URL joining nodes reach this server at: the bind
// address when it is a specific one, else the advertise address.
func nodeServerURL(bind, advertise net.IP, port int) string {
	host := bind
	if bind == nil || bind.IsUnspecified() {
		host = advertise
	}
	return "https://" + net.JoinHostPort(host.String(), strconv.Itoa(port))
}

func portOf(serverURL string) (int, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(u.Port())
}
