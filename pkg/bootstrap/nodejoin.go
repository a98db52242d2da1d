package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/controllers"
	"github.com/edgeplane/edgeplane/pkg/kubeadmcompat"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// nodeJoinRetry bounds the retries of transient API errors while the
// server publishes what joining nodes need.
const nodeJoinRetry = 20 * time.Second

// startNodeJoin makes the cluster joinable by nodes, before the server says
// it is ready: kube-public/cluster-info and kubeadm's ConfigMaps and roles
// (kubeadmcompat), the CSR bindings of node bootstrap tokens (so that a
// node token works as soon as the server is ready, before the
// controller-manager's first term creates them too), and the default node
// token in <data-dir>/node-token (nodetoken.EnsureDefault says what happens
// when its Secret was deleted).
func (s *server) startNodeJoin(ctx context.Context, o CompletedOptions) error {
	logger := klog.FromContext(ctx)
	cfg, err := adminConfig(s.pki.AdminKubeconfig, "edgeplane-node-join")
	if err != nil {
		return fmt.Errorf("node join: %w", err)
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
		if err := retryAPI(ctx, nodeJoinRetry, st.run); err != nil {
			return fmt.Errorf("node join: %s: %w", st.what, err)
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

// retryAPI runs f until it succeeds, retrying errors that may pass (the API
// server settling, a conflict, a timeout) for up to window; an invalid or
// forbidden request, or a problem that is not the API's, fails at once.
func retryAPI(ctx context.Context, window time.Duration, f func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, window, true, func(ctx context.Context) (bool, error) {
		last = f(ctx)
		switch {
		case last == nil:
			return true, nil
		case apierrors.IsInvalid(last), apierrors.IsBadRequest(last), apierrors.IsForbidden(last), apierrors.IsUnauthorized(last):
			return false, last
		case apierrors.ReasonForError(last) == metav1.StatusReasonUnknown && !errors.As(last, new(net.Error)):
			return false, last // not from the API: retrying will not help
		}
		klog.FromContext(ctx).V(2).Info("Retrying", "err", last.Error())
		return false, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}
