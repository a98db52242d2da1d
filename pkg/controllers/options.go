// Package controllers runs kube-controller-manager and kube-scheduler inside
// the edgeplane process, each as a bootstrap component with its own client
// certificate, talking to the local API server over loopback.
//
// Both upstream components are driven through their options structs and
// their exported Config/Setup and Run functions, never through their cobra
// commands (those install signal handlers and parse process-wide flags).
// Their secure serving ports are turned off; health is reported by the
// components here (Ready, and Check as a healthz.HealthChecker).
//
// Upstream leader election ends the process when it stops (os.Exit or
// klog.FlushAndExit), so with Options.LeaderElect this package runs its own
// election on the upstream lease names and runs the upstream component with
// its leader election off, for as long as the lease is held.
package controllers

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"k8s.io/client-go/informers"
	netutils "k8s.io/utils/net"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

// DefaultClusterCIDR is the pod network, as in k3s.
const DefaultClusterCIDR = "10.42.0.0/16"

// Node CIDR mask sizes the node IPAM controller uses by default.
const (
	nodeMaskIPv4 = 24
	nodeMaskIPv6 = 64
	// maxNodeMaskDiff is the most bits between the cluster CIDR prefix and the
	// node mask that the node IPAM range allocator accepts.
	maxNodeMaskDiff = 16
)

// Options configures the controller-manager and the scheduler.
type Options struct {
	// PKI gives the CA, key and kubeconfig paths written by certs.Ensure:
	// ControllerManagerKubeconfig and SchedulerKubeconfig (client certs for
	// system:kube-controller-manager and system:kube-scheduler), AdminKubeconfig
	// (to create the node bootstrap RBAC), ClientCA and KubeletServingCA (CSR
	// signers), ServerCA (kube-root-ca.crt), ServiceAccountKey (legacy
	// service-account token secrets).
	PKI *certs.PKI
	// LeafValidity is the server's leaf lifetime (0: the default), from
	// which certs.SigningDuration derives the CSR signing duration.
	LeafValidity time.Duration

	// ClusterCIDR is the pod network: one CIDR, or an IPv4 and an IPv6 CIDR
	// separated by a comma. Empty means DefaultClusterCIDR.
	ClusterCIDR string
	// AllocateNodeCIDRs makes the node IPAM controller give each Node a
	// podCIDR from ClusterCIDR.
	AllocateNodeCIDRs bool
	// ServiceCIDR is the Service network; node IPAM keeps it out of podCIDRs.
	ServiceCIDR *net.IPNet

	// LeaderElect runs only while holding the kube-system lease of the
	// component (kube-controller-manager / kube-scheduler). Leave it off for a
	// single server; turn it on when several servers share a datastore.
	LeaderElect bool

	// MaxWorkers caps each controller's concurrent syncs (0: upstream's
	// defaults); the small profile sets it.
	MaxWorkers int32
	// Lean turns off controllers an edge host can do without, for memory
	// (the small profile; see leanDisabledControllers).
	Lean bool

	// Informers is the API server's shared informer factory
	// (chain.Server.Informers). The scheduler reads through it every type
	// but its Pods, and the root-ca-cert-publisher its Namespaces
	// (termInformers), instead of watching them again; nil: they list and
	// watch everything themselves, as upstream's do.
	Informers informers.SharedInformerFactory

	// NodeMonitorGracePeriod is how long a node may go without renewing its
	// Lease before the node lifecycle controller marks it NotReady
	// (nodeconfig.MonitorGracePeriod of --node-heartbeat); 0 keeps upstream's
	// 50 s.
	NodeMonitorGracePeriod time.Duration
}

// clusterCIDR is ClusterCIDR with the default applied, in the canonical
// comma-separated form upstream parses.
func (o *Options) clusterCIDR() string {
	s := strings.TrimSpace(o.ClusterCIDR)
	if s == "" {
		return DefaultClusterCIDR
	}
	cidrs, err := parseClusterCIDR(s)
	if err != nil {
		return s // Validate reports it
	}
	parts := make([]string, len(cidrs))
	for i, c := range cidrs {
		parts[i] = c.String()
	}
	return strings.Join(parts, ",")
}

// Validate reports every problem with o at once.
func (o *Options) Validate() []error {
	var errs []error
	if o.PKI == nil {
		return append(errs, errors.New("controllers: no PKI given"))
	}
	for _, f := range []struct{ what, path string }{
		{"controller-manager kubeconfig", o.PKI.ControllerManagerKubeconfig},
		{"scheduler kubeconfig", o.PKI.SchedulerKubeconfig},
		{"admin kubeconfig", o.PKI.AdminKubeconfig},
		{"client CA certificate", o.PKI.ClientCA.Cert},
		{"client CA key", o.PKI.ClientCA.Key},
		{"cluster CA certificate", o.PKI.ServerCA.Cert},
		{"kubelet-serving CA certificate", o.PKI.KubeletServingCA.Cert},
		{"kubelet-serving CA key", o.PKI.KubeletServingCA.Key},
		{"service-account key", o.PKI.ServiceAccountKey},
	} {
		if f.path == "" {
			errs = append(errs, fmt.Errorf("controllers: no %s path in the PKI", f.what))
		}
	}
	return append(errs, ValidateClusterCIDR(o.clusterCIDR(), o.ServiceCIDR, o.AllocateNodeCIDRs)...)
}

// ValidateClusterCIDR checks a --cluster-cidr value (empty means the
// default): one CIDR or a dual-stack pair, apart from serviceCIDR (may be
// nil), and, when node CIDRs are allocated, able to hold the node IPAM
// controller's default per-node ranges (/24 for IPv4, /64 for IPv6).
func ValidateClusterCIDR(clusterCIDR string, serviceCIDR *net.IPNet, allocate bool) []error {
	if strings.TrimSpace(clusterCIDR) == "" {
		clusterCIDR = DefaultClusterCIDR
	}
	cidrs, err := parseClusterCIDR(clusterCIDR)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, c := range cidrs {
		if serviceCIDR != nil && overlaps(c, serviceCIDR) {
			errs = append(errs, fmt.Errorf("--cluster-cidr %s overlaps --service-cidr %s", c, serviceCIDR))
		}
		if !allocate {
			continue
		}
		ones, bits := c.Mask.Size()
		mask := nodeMaskIPv4
		if bits == 128 {
			mask = nodeMaskIPv6
		}
		switch {
		case ones > mask:
			errs = append(errs, fmt.Errorf("--cluster-cidr %s is smaller than one node's /%d: it cannot hold node pod CIDRs", c, mask))
		case mask-ones > maxNodeMaskDiff:
			errs = append(errs, fmt.Errorf("--cluster-cidr %s is too large for /%d node pod CIDRs: use a prefix of at least /%d", c, mask, mask-maxNodeMaskDiff))
		}
	}
	return errs
}

// parseClusterCIDR parses one CIDR, or a dual-stack pair.
func parseClusterCIDR(s string) ([]*net.IPNet, error) {
	var cidrs []*net.IPNet
	for _, part := range strings.Split(s, ",") {
		_, c, err := netutils.ParseCIDRSloppy(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("--cluster-cidr %q: %v", s, err)
		}
		cidrs = append(cidrs, c)
	}
	switch len(cidrs) {
	case 1:
	case 2:
		if dual, err := netutils.IsDualStackCIDRs(cidrs); err != nil || !dual {
			return nil, fmt.Errorf("--cluster-cidr %q: two CIDRs must be one IPv4 and one IPv6", s)
		}
	default:
		return nil, fmt.Errorf("--cluster-cidr %q: give one CIDR, or one IPv4 and one IPv6 CIDR", s)
	}
	for _, c := range cidrs {
		if ip := c.IP; ip.IsUnspecified() || ip.IsLoopback() {
			return nil, fmt.Errorf("--cluster-cidr %q: %s is not a usable pod network", s, c)
		}
	}
	return cidrs, nil
}

// overlaps reports whether two networks share an address.
func overlaps(a, b *net.IPNet) bool {
	return a.Contains(b.IP) || b.Contains(a.IP)
}
