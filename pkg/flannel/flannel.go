// Package flannel runs flannel in this process to carry pod traffic between
// nodes: flannel's kube subnet manager takes each node's lease from the
// Node's spec.podCIDR (no datastore of its own), and a backend (vxlan by
// default, host-gw on a flat LAN, WireGuard when the kernel has it) routes
// every other node's pod CIDR. The pods' interfaces stay ours: pkg/cni
// writes a bridge + host-local conflist for the node's pod CIDR with the
// MTU the backend needs, and flannel masquerades traffic that leaves the
// cluster CIDR.
//
// Lifecycle: Start returns at once; the network comes up in the background
// once the node has registered and the node IPAM controller has given it a
// pod CIDR (the kubelet registers the node). Ready and MTU block until the
// backend is up and has chosen its MTU. A network that fails to come up, or
// fails later, ends the component (Done, Err), and with it the node: a
// node whose pods cannot reach the other nodes must not look healthy.
package flannel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/flannel-io/flannel/pkg/backend"
	"github.com/flannel-io/flannel/pkg/ipmatch"
	"github.com/flannel-io/flannel/pkg/lease"
	"github.com/flannel-io/flannel/pkg/subnet"
	"github.com/flannel-io/flannel/pkg/subnet/kube"
	"github.com/flannel-io/flannel/pkg/trafficmngr"
	"github.com/flannel-io/flannel/pkg/trafficmngr/iptables"
	"github.com/flannel-io/flannel/pkg/trafficmngr/nftables"
	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2"

	// The backends register themselves with flannel's backend manager.
	_ "github.com/flannel-io/flannel/pkg/backend/hostgw"
	_ "github.com/flannel-io/flannel/pkg/backend/vxlan"
	_ "github.com/flannel-io/flannel/pkg/backend/wireguard"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/cni"
)

// Backends, as --flannel-backend names them.
const (
	BackendVXLAN     = "vxlan"
	BackendHostGW    = "host-gw"
	BackendWireGuard = "wireguard-native"
	// BackendNone runs no flannel: the node's bridge only (one node), or a
	// pod network the user brings (Cilium, Calico).
	BackendNone = "none"
	// DefaultBackend works across routers and NAT-free LANs alike.
	DefaultBackend = BackendVXLAN
)

// Backends lists the valid --flannel-backend values.
var Backends = []string{BackendVXLAN, BackendHostGW, BackendWireGuard, BackendNone}

// flannelType maps our backend names to flannel's backend types.
var flannelType = map[string]string{
	BackendVXLAN:     "vxlan",
	BackendHostGW:    "host-gw",
	BackendWireGuard: "wireguard",
}

// annotationPrefix is flannel's own, so that flannel tools read the nodes.
const annotationPrefix = "flannel.alpha.coreos.com"

// resyncSeconds is how often flannel re-checks its masquerade and forward
// rules (upstream's --iptables-resync default).
const resyncSeconds = 5

// ValidateBackend returns a clear error for an unknown backend name.
func ValidateBackend(name string) error {
	if name == BackendNone {
		return nil
	}
	if _, ok := flannelType[name]; !ok {
		return fmt.Errorf("--flannel-backend %q is not one of: %v", name, Backends)
	}
	return nil
}

// Config is one node's flannel.
type Config struct {
	// Node is the Node's name.
	Node string
	// NodeIP is the node's address; its interface carries the pod traffic
	// (flannel's --iface). Nil picks the default route's interface.
	NodeIP net.IP
	// ClusterCIDR is the whole pod network (the server's --cluster-cidr).
	ClusterCIDR string
	// Backend is one of Backends other than none.
	Backend string
	// Kubeconfig holds the node's credentials.
	Kubeconfig string
	// Dir holds net-conf.json and subnet.env.
	Dir string
	// NFTables makes flannel's masquerade and forward rules nftables rules
	// (as kube-proxy's, so that one host does not mix the two).
	NFTables bool
}

// Flannel is the component.
type Flannel struct {
	cfg Config
	component.Status

	cancel context.CancelFunc
	wg     sync.WaitGroup // the starter and flannel's own goroutines

	mtuOnce sync.Once
	mtuDone chan struct{}
	mtu     int
	mtuErr  error
}

// New checks cfg. The kernel's support of the backend is checked in Start.
func New(cfg Config) (*Flannel, error) {
	if err := ValidateBackend(cfg.Backend); err != nil {
		return nil, err
	}
	if cfg.Backend == BackendNone {
		return nil, errors.New("flannel: backend none runs no flannel")
	}
	if _, _, err := net.ParseCIDR(cfg.ClusterCIDR); err != nil {
		return nil, fmt.Errorf("flannel: cluster CIDR %q: %v (flannel takes one IPv4 CIDR)", cfg.ClusterCIDR, err)
	}
	if cfg.Node == "" || cfg.Kubeconfig == "" || cfg.Dir == "" {
		return nil, errors.New("flannel: node name, kubeconfig and directory are required")
	}
	return &Flannel{cfg: cfg, mtuDone: make(chan struct{})}, nil
}

// Name implements the bootstrap component contract.
func (f *Flannel) Name() string { return "flannel" }

// Start checks that the kernel has what the backend needs and starts the
// network in the background.
func (f *Flannel) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("flannel")
	if f.cfg.Backend == BackendWireGuard {
		if err := probeWireGuard(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(f.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("flannel: %w", err)
	}
	netConf, err := f.netConf()
	if err != nil {
		return err
	}
	if _, err := atomicfile.Write(f.netConfPath(), netConf, 0o600); err != nil {
		return fmt.Errorf("flannel: %w", err)
	}
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	f.cancel = cancel
	f.wg.Go(func() { f.run(runCtx) })
	return nil
}

// Ready waits until the network across nodes is up.
func (f *Flannel) Ready(ctx context.Context) error { return f.WaitReady(ctx) }

// Stop ends flannel's goroutines. The routes, the vxlan device and the
// rules stay: pods keep their network while the node restarts.
func (f *Flannel) Stop(ctx context.Context) error {
	if f.cancel == nil {
		return nil
	}
	f.cancel()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MTU blocks until the backend has chosen the pods' MTU, or ctx ends, or
// flannel failed to come up.
func (f *Flannel) MTU(ctx context.Context) (int, error) {
	select {
	case <-f.mtuDone:
		return f.mtu, f.mtuErr
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (f *Flannel) setMTU(mtu int, err error) {
	f.mtuOnce.Do(func() { f.mtu, f.mtuErr = mtu, err; close(f.mtuDone) })
}

func (f *Flannel) netConfPath() string { return filepath.Join(f.cfg.Dir, "net-conf.json") }

// netConf is flannel's network configuration (its net-conf.json).
func (f *Flannel) netConf() ([]byte, error) {
	conf := map[string]any{
		"Network":        f.cfg.ClusterCIDR,
		"EnableIPv4":     true,
		"EnableNFTables": f.cfg.NFTables,
		"Backend":        map[string]any{"Type": flannelType[f.cfg.Backend]},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("flannel: %w", err)
	}
	if _, err := subnet.ParseConfig(string(b)); err != nil {
		return nil, fmt.Errorf("flannel: network configuration: %w", err)
	}
	return b, nil
}

// run brings the network up once the node has a pod CIDR, then runs the
// backend until ctx ends. Anything else ends the component.
func (f *Flannel) run(ctx context.Context) {
	err := f.up(ctx)
	if ctx.Err() != nil {
		f.setMTU(0, ctx.Err())
		return
	}
	if err == nil {
		err = component.ErrEndedOnItsOwn
	}
	err = fmt.Errorf("the pod network across nodes is down: %w", err)
	f.setMTU(0, err)
	f.End(err)
}

func (f *Flannel) up(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	client, err := kubeclient.New(f.cfg.Kubeconfig, "flannel", kubeclient.Steady)
	if err != nil {
		return err
	}
	// flannel's lease is the Node's pod CIDR: wait until it has one (its
	// AcquireLease gives up after 30 s).
	if _, err := cni.WaitForPodCIDRs(ctx, client, f.cfg.Node); err != nil {
		return err
	}
	sm, stopSM, err := untilSynced(ctx, func(ctx context.Context) (subnet.Manager, error) {
		return newSubnetManager(ctx, f.cfg.Kubeconfig, f.cfg.Node, f.netConfPath())
	})
	if err != nil {
		return err
	}
	defer stopSM()
	config, err := sm.GetNetworkConfig(ctx)
	if err != nil {
		return fmt.Errorf("flannel: network configuration: %w", err)
	}
	ipStack, err := ipmatch.GetIPFamily(config.EnableIPv4, config.EnableIPv6)
	if err != nil {
		return fmt.Errorf("flannel: %w", err)
	}
	iface := ""
	if f.cfg.NodeIP != nil {
		iface = f.cfg.NodeIP.String()
	}
	extIface, err := ipmatch.LookupExtIface(iface, "", "", ipStack, ipmatch.PublicIPOpts{PublicIP: iface})
	if err != nil {
		return fmt.Errorf("flannel: no interface holds the node address %q: %w", iface, err)
	}
	be, err := backend.NewManager(ctx, sm, extIface).GetBackend(config.BackendType)
	if err != nil {
		return fmt.Errorf("flannel: backend %s: %w", f.cfg.Backend, err)
	}
	bn, err := be.RegisterNetwork(ctx, &f.wg, config)
	if err != nil {
		return fmt.Errorf("flannel: backend %s: %w", f.cfg.Backend, err)
	}
	// Rules of the other rule system are a previous run's: remove them.
	if err := trafficManager(!f.cfg.NFTables).CleanUp(ctx); err != nil {
		logger.Error(err, "Removing flannel's rules of the other rule system")
	}
	tm := trafficManager(f.cfg.NFTables)
	if err := tm.Init(ctx); err != nil {
		return fmt.Errorf("flannel: rules: %w", err)
	}
	lease := bn.Lease()
	// Masquerade what leaves the cluster CIDR; pod to pod keeps its source.
	if err := tm.SetupAndEnsureMasqRules(ctx, config.Network, lease.Subnet, config.Network,
		config.IPv6Network, lease.IPv6Subnet, config.IPv6Network, lease, resyncSeconds, false); err != nil {
		return fmt.Errorf("flannel: masquerade rules: %w", err)
	}
	tm.SetupAndEnsureForwardRules(ctx, config.Network, config.IPv6Network, resyncSeconds)
	if err := sm.HandleSubnetFile(filepath.Join(f.cfg.Dir, "subnet.env"), config, true, lease.Subnet, lease.IPv6Subnet, bn.MTU()); err != nil {
		logger.Error(err, "Writing subnet.env (kept for tools that read it)")
	}
	logger.Info("The pod network across nodes is up", "backend", f.cfg.Backend, "interface", extIface.Iface.Name,
		"subnet", lease.Subnet.String(), "mtu", bn.MTU())
	f.setMTU(bn.MTU(), nil)
	f.MarkReady()

	// The backend carries the traffic until ctx ends; CompleteLease
	// marks the Node's network available and returns.
	backendDone := make(chan struct{})
	f.wg.Go(func() { defer close(backendDone); bn.Run(ctx) })
	if err := completeLease(ctx, sm, lease, &f.wg); err != nil && ctx.Err() == nil {
		return fmt.Errorf("flannel: lease: %w", err)
	}
	<-backendDone
	if ctx.Err() == nil {
		return fmt.Errorf("flannel: the %s backend stopped", f.cfg.Backend)
	}
	return nil
}

// completeLease is the subnet manager's CompleteLease, which marks the
// Node's network available (a patch of the Node's status, at every start),
// retried while the API cannot take it: a node that started with no API
// server answering, or whose node-local API endpoint answers writes with
// 503, keeps its network up and marks it once a server takes the patch.
// Only a refusal is an error (which ends flannel, as before).
func completeLease(ctx context.Context, sm subnet.Manager, l *lease.Lease, wg *sync.WaitGroup) error {
	logger := klog.FromContext(ctx)
	logged := false
	return kubeclient.Retry(ctx, "flannel: marking the node's network available", 0, func(ctx context.Context) error {
		err := sm.CompleteLease(ctx, l, wg)
		if err != nil && !logged && kubeclient.Transient(err) {
			logged = true
			logger.Info("The API does not take the Node's network condition yet: retrying; the network carries traffic meanwhile", "err", err.Error())
		}
		return err
	})
}

// untilSynced makes a subnet manager with newSM, again each time its Node
// informer does not sync within flannel's own wait (10 minutes): an API
// that answers the node's own Node but not the list of all Nodes for that
// long (a node started while no server answers) is waited for, not an end
// of flannel and the node. Each failed manager's informer is stopped; the
// returned stop stops the one that synced. Any other error ends at once.
func untilSynced(ctx context.Context, newSM func(context.Context) (subnet.Manager, error)) (subnet.Manager, context.CancelFunc, error) {
	for {
		smCtx, cancel := context.WithCancel(ctx)
		sm, err := newSM(smCtx)
		if err == nil {
			return sm, cancel, nil
		}
		cancel()
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, err
		}
		klog.FromContext(ctx).Info("The Nodes did not sync from the API: waiting for it again", "err", err.Error())
	}
}

// nodeNameMu guards NODE_NAME: flannel v0.28's kube subnet manager reads the
// node's name from the environment only (its constructor that takes a name
// is unexported). One node runs per process, so the value never differs.
var nodeNameMu sync.Mutex

func newSubnetManager(ctx context.Context, kubeconfig, node, netConfPath string) (subnet.Manager, error) {
	nodeNameMu.Lock()
	defer nodeNameMu.Unlock()
	if cur := os.Getenv("NODE_NAME"); cur != "" && cur != node {
		return nil, fmt.Errorf("flannel: NODE_NAME is %q in this process's environment, want the node's name %q: unset it", cur, node)
	}
	if err := os.Setenv("NODE_NAME", node); err != nil {
		return nil, fmt.Errorf("flannel: %w", err)
	}
	sm, err := kube.NewSubnetManager(ctx, "", kubeconfig, annotationPrefix, netConfPath, true)
	if err != nil {
		return nil, fmt.Errorf("flannel: subnet manager: %w", err)
	}
	return sm, nil
}

func trafficManager(nft bool) trafficmngr.TrafficManager {
	if nft {
		return &nftables.NFTablesManager{}
	}
	return &iptables.IPTablesManager{}
}

// probeWireGuard creates and deletes a WireGuard link: the kernel module
// loads on demand, so its absence from /sys/module proves nothing.
func probeWireGuard() error {
	name := fmt.Sprintf("epwgprobe%d", os.Getpid()%100000)
	link := &netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: name}}
	if err := netlink.LinkAdd(link); err != nil {
		return fmt.Errorf("--flannel-backend %s: this kernel cannot make a WireGuard interface (%v): use a kernel with WireGuard (Linux 5.6 or later, or the wireguard module: modprobe wireguard), or --flannel-backend %s", BackendWireGuard, err, BackendVXLAN)
	}
	_ = netlink.LinkDel(link)
	return nil
}
