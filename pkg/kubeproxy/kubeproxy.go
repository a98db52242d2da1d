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
// Lifecycle: Start returns at once and the proxy starts in the background.
// Ready waits for its first sync of the Services' rules; a proxy that fails
// ends the component (Done, Err), and with it the node. Stop cancels its
// context; upstream v1.37.2's ProxyServer.Run starts its sync loop and
// informers without a way to stop them (wait.NeverStop), so they end with
// the process (docs/RELIABILITY.md; TestUpstreamProxyOutlivesStop fails once
// upstream stops them with the context).
package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	proxymetrics "k8s.io/kubernetes/pkg/proxy/metrics"
	"sigs.k8s.io/knftables"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/component"
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
	component.Status
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

// Ready waits for the proxy's first sync of the Services' rules.
func (p *Proxy) Ready(ctx context.Context) error { return p.WaitReady(ctx) }

// Stop cancels the proxy's context (see the package comment for what
// upstream leaves running). The rules stay: Services keep answering while
// the node restarts.
func (p *Proxy) Stop(ctx context.Context) error {
	return p.loop.Stop(ctx)
}

func (p *Proxy) run(ctx context.Context, args []string) {
	logger := klog.FromContext(ctx)
	o, err := options(args)
	if err != nil {
		p.End(fmt.Errorf("services will not answer on this node: %w", err))
		return
	}
	logger.Info("Starting kube-proxy", "mode", p.cfg.Mode)
	done := make(chan error, 1)
	// Options.Run returns only on an error (see the package comment).
	go func() { done <- o.Run(ctx) }()
	go p.waitSynced(ctx)
	select {
	case err := <-done:
		if ctx.Err() == nil {
			if err == nil {
				err = component.ErrEndedOnItsOwn
			}
			p.End(fmt.Errorf("services no longer answer on this node: %w", err))
		}
	case <-ctx.Done():
	}
}

// syncPoll is how often Ready looks for the proxy's first sync.
const syncPoll = 250 * time.Millisecond

// waitSynced marks the proxy ready once it has written the Services' rules
// once: upstream's sync_proxy_rules_last_timestamp_seconds, in this
// process's metrics registry, is set then.
func (p *Proxy) waitSynced(ctx context.Context) {
	t := time.NewTicker(syncPoll)
	defer t.Stop()
	for {
		if lastSync() > 0 {
			p.MarkReady()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-p.Done():
			return
		case <-t.C:
		}
	}
}

// lastSync is when the proxy last synced its rules (Unix seconds; 0: never).
// It collects upstream's one gauge, never the whole registry: gathering
// the process's registry would also run the kubelet's collectors, whose
// log-stats collector asks the stats provider for every pod and logs an
// error while cAdvisor has no data yet (a node's first seconds).
func lastSync() float64 {
	gauge := proxymetrics.SyncProxyRulesLastTimestamp
	// Registered (by the proxy's start) or nothing to read: until then
	// it is a placeholder that cannot be collected.
	if !gauge.IsCreated() {
		return 0
	}
	ch := make(chan prometheus.Metric, 2)
	go func() {
		gauge.Collect(ch)
		close(ch)
	}()
	var last float64
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil && d.Gauge != nil {
			last = max(last, d.Gauge.GetValue())
		}
	}
	return last
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
