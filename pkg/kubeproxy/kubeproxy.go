// Package kubeproxy runs upstream kube-proxy (k8s.io/kubernetes
// cmd/kube-proxy/app) in this process on every node: Services' cluster
// IPs, NodePorts and load-balancer IPs answer on the node. The mode is
// nftables where the kernel and the nft tool have it, iptables otherwise.
//
// kube-proxy is configured through upstream's own flag set (Args), so that
// upstream's parsing, defaulting and validation apply unchanged; not
// through a configuration file, which upstream watches with an inotify
// instance and exits on any change of (inotify instances are a small
// per-user budget that the kubelet and containerd also draw on: a test run
// beside other kubelets lost kube-proxy to "too many open files").
// Credentials are the node's own (its kubelet client certificate): the
// server binds upstream's system:node-proxier ClusterRole to the group
// system:nodes (EnsureRBAC), so no second certificate needs minting and
// rotating per node.
//
// Lifecycle: Start returns at once and the proxy starts in the background
// when the node's credentials exist (on an agent, TLS bootstrap writes them
// after start). Stop cancels its context; upstream v1.37.2's ProxyServer.Run
// starts its sync loop and node informer without a way to stop them, so
// they end with the process (docs/RELIABILITY.md).
package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	"sigs.k8s.io/knftables"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/pkg/cni"
)

// Modes, as --kube-proxy-mode names them.
const (
	ModeAuto     = "auto"
	ModeNFTables = "nftables"
	ModeIPTables = "iptables"
)

// Modes lists the valid --kube-proxy-mode values.
var Modes = []string{ModeAuto, ModeNFTables, ModeIPTables}

// ValidateMode returns a clear error for an unknown mode.
func ValidateMode(mode string) error {
	for _, m := range Modes {
		if mode == m {
			return nil
		}
	}
	return fmt.Errorf("--kube-proxy-mode %q is not one of: %s", mode, strings.Join(Modes, ", "))
}

// ResolveMode turns auto into nftables when this host can run kube-proxy's
// nftables mode (the nft tool and kernel support, which knftables checks
// as kube-proxy does), else iptables. reason says why, for the log.
func ResolveMode(mode string) (resolved, reason string) {
	if mode != ModeAuto {
		return mode, "asked for"
	}
	if _, err := knftables.New(knftables.IPv4Family, "edgeplane-probe"); err != nil {
		return ModeIPTables, "nftables unavailable: " + err.Error()
	}
	return ModeNFTables, "nft and kernel support found"
}

// Config is one node's kube-proxy.
type Config struct {
	// Node is the Node's name.
	Node string
	// NodeIP is the node's primary address (may be nil).
	NodeIP net.IP
	// ClusterCIDR tells pod traffic from outside traffic.
	ClusterCIDR string
	// Mode is nftables or iptables (ResolveMode first).
	Mode string
	// Kubeconfig holds the node's credentials.
	Kubeconfig string
}

// Proxy is the component.
type Proxy struct {
	cfg  Config
	loop background.Loop
}

// New checks cfg.
func New(cfg Config) (*Proxy, error) {
	if cfg.Mode != ModeNFTables && cfg.Mode != ModeIPTables {
		return nil, fmt.Errorf("kube-proxy: mode %q: want %s or %s", cfg.Mode, ModeNFTables, ModeIPTables)
	}
	if cfg.Node == "" || cfg.Kubeconfig == "" {
		return nil, errors.New("kube-proxy: node name and kubeconfig are required")
	}
	return &Proxy{cfg: cfg}, nil
}

// Name implements the bootstrap component contract.
func (p *Proxy) Name() string { return "kube-proxy" }

// Start starts the proxy in the background.
func (p *Proxy) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("kube-proxy")
	args := Args(p.cfg, currentOOMScoreAdj())
	p.loop.Start(klog.NewContext(ctx, logger), func(runCtx context.Context) { p.run(runCtx, args) })
	return nil
}

// Ready is immediate: see the package comment.
func (p *Proxy) Ready(context.Context) error { return nil }

// Stop cancels the proxy's context (see the package comment for what
// upstream leaves running). The rules stay: Services keep answering while
// the node restarts.
func (p *Proxy) Stop(ctx context.Context) error {
	return p.loop.Stop(ctx)
}

func (p *Proxy) run(ctx context.Context, args []string) {
	logger := klog.FromContext(ctx)
	if _, err := cni.WaitForClient(ctx, p.cfg.Kubeconfig, "edgeplane/kube-proxy"); err != nil {
		return // ctx ended
	}
	o, err := options(args)
	if err != nil {
		logger.Error(err, "Services will not answer on this node")
		return
	}
	logger.Info("Starting kube-proxy", "mode", p.cfg.Mode)
	done := make(chan error, 1)
	// Options.Run returns only on an error (see the package comment).
	go func() { done <- o.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil && ctx.Err() == nil {
			logger.Error(err, "kube-proxy stopped: Services will not answer on this node")
		}
	case <-ctx.Done():
	}
}

// options parses args with upstream's flag set, then completes and
// validates them as upstream's command does.
func options(args []string) (*proxyapp.Options, error) {
	o := proxyapp.NewOptions()
	fs := pflag.NewFlagSet("kube-proxy", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("kube-proxy: %w", err)
	}
	if err := o.Complete(fs); err != nil {
		return nil, fmt.Errorf("kube-proxy: %w", err)
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("kube-proxy: %w", err)
	}
	return o, nil
}

// Args are kube-proxy's flags for c. oomScoreAdj is the process's own:
// kube-proxy would set its process's OOM score to -999, and in edgeplane
// its process is the whole node. The host's conntrack table size and
// timeouts are left alone (0): nf_conntrack_max is host-wide, and a small
// board's own value is deliberate.
func Args(c Config, oomScoreAdj int32) []string {
	args := []string{
		"--hostname-override=" + c.Node,
		"--proxy-mode=" + c.Mode,
		"--kubeconfig=" + c.Kubeconfig,
		"--kube-api-qps=5", "--kube-api-burst=10",
		"--config-sync-period=15m",
		"--oom-score-adj=" + strconv.Itoa(int(oomScoreAdj)),
		"--conntrack-max-per-core=0", "--conntrack-min=0",
		"--conntrack-tcp-timeout-established=0s", "--conntrack-tcp-timeout-close-wait=0s",
	}
	if c.ClusterCIDR != "" {
		args = append(args, "--cluster-cidr="+c.ClusterCIDR)
	}
	if c.NodeIP != nil {
		args = append(args, "--bind-address="+c.NodeIP.String())
	}
	return args
}

// currentOOMScoreAdj reads this process's OOM score adjustment (0 when it
// cannot be read).
func currentOOMScoreAdj() int32 {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return int32(v)
}
