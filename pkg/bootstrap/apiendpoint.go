package bootstrap

import (
	"context"
	"fmt"
	"net"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// The `kubernetes` Service's endpoint is the advertise address: pods, and
// every in-cluster client, reach the API server there. The server publishes
// it only where the API listens:
//
//   - --bind-address 0.0.0.0 or :: listens on every address (both families):
//     the advertise address, the host's primary one by default or the one
//     given, is served.
//   - A specific --bind-address is the advertise address unless
//     --advertise-address names another. Another address of this host is
//     refused (nothing listens there). An address that is not this host's
//     is taken as given: a load balancer or NAT in front of the server.
//   - A loopback --bind-address serves this host only. With no
//     --advertise-address the Service gets no endpoint (the API is for
//     this host's clients), and a server that finds a container runtime
//     refuses to become a node: its pods could not reach the API.
//
// That is k3s's rule (a specific --bind-address is the advertise address),
// made strict where the address would not be served.

// apiEndpoint is how the `kubernetes` Service reaches this server.
type apiEndpoint struct {
	// explicit is true when --advertise-address was given.
	explicit bool
	// local is true when the advertise address is one of this host's.
	local bool
}

// hostAddresses lists this host's interface addresses.
func hostAddresses() ([]net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var ips []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ips = append(ips, n.IP)
		}
	}
	return ips, nil
}

// isHostAddress reports whether ip is one of host's addresses.
func isHostAddress(ip net.IP, host []net.IP) bool {
	for _, h := range host {
		if h.Equal(ip) {
			return true
		}
	}
	return false
}

// publishesEndpoint reports whether the server publishes its advertise
// address as the `kubernetes` Service's endpoint: not when it listens on
// loopback and no --advertise-address was given.
func (c *completedOptions) publishesEndpoint() bool {
	return c.BindAddress == nil || !c.BindAddress.IsLoopback() || c.Endpoint.explicit
}

// validateEndpoint refuses an --advertise-address of this host that the
// bind address does not serve.
func (c *completedOptions) validateEndpoint() error {
	bind, adv := c.BindAddress, c.AdvertiseAddress
	if bind == nil || adv == nil || bind.IsUnspecified() || bind.Equal(adv) || !c.Endpoint.explicit || !c.Endpoint.local {
		return nil
	}
	fix := fmt.Sprintf("pass --bind-address %s (every address) or --bind-address %s", unspecifiedLike(adv), adv)
	if !bind.IsLoopback() {
		fix += fmt.Sprintf(", or leave --advertise-address out (it defaults to the bind address %s)", bind)
	}
	return fmt.Errorf("--advertise-address %s is an address of this host, but the API listens on --bind-address %s only: pods and nodes would find nothing at the kubernetes Service's endpoint; %s",
		adv, bind, fix)
}

// nodeReachesAPI refuses to make this server a node when its pods could not
// reach the API server: runtime names the container runtime found.
func (c *completedOptions) nodeReachesAPI(runtime string) error {
	if c.BindAddress == nil || !c.BindAddress.IsLoopback() {
		return nil
	}
	return fmt.Errorf("this server would be a node (%s answers), but the API listens on loopback only (--bind-address %s), where its pods cannot connect: the kubernetes Service's endpoint (--advertise-address %s) would not be served. Pass --bind-address %s (every address) or --bind-address %s, or --disable=kubelet to keep this server a control plane only",
		runtime, c.BindAddress, c.AdvertiseAddress, unspecifiedLike(c.AdvertiseAddress), c.AdvertiseAddress)
}

// unspecifiedLike is 0.0.0.0, or :: for an IPv6 address.
func unspecifiedLike(ip net.IP) net.IP {
	if ip != nil && ip.To4() == nil {
		return net.IPv6unspecified
	}
	return net.IPv4zero
}

// logEndpoint says at start-up when the `kubernetes` Service gets no endpoint.
func logEndpoint(ctx context.Context, o CompletedOptions) {
	if o.publishesEndpoint() {
		return
	}
	klog.FromContext(ctx).Info("The API listens on loopback only: the kubernetes Service gets no endpoint, and pods cannot reach the API server; pass --bind-address 0.0.0.0 for nodes and pods",
		"bindAddress", o.BindAddress.String())
}

// clearServiceEndpoint removes the `kubernetes` Endpoints and EndpointSlice
// that an earlier run, bound to a reachable address, left behind, when this
// run publishes none (the none reconciler leaves them as they are).
func (s *server) clearServiceEndpoint(ctx context.Context, o CompletedOptions) error {
	if o.publishesEndpoint() {
		return nil
	}
	client, err := s.adminClient("service-endpoint")
	if err != nil {
		return err
	}
	const name = "kubernetes"
	return kubeclient.Retry(ctx, "removing the kubernetes Service's endpoints", startupRetry, func(ctx context.Context) error {
		err := client.CoreV1().Endpoints(metav1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		err = client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
}
