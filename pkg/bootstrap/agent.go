package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/logfilter"
	"github.com/edgeplane/edgeplane/pkg/apiendpoint"
	"github.com/edgeplane/edgeplane/pkg/containerd"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
	"github.com/edgeplane/edgeplane/pkg/node"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
	"github.com/edgeplane/edgeplane/pkg/nodetunnel"
	"github.com/edgeplane/edgeplane/pkg/preflight"
	"github.com/edgeplane/edgeplane/pkg/sdnotify"
)

// AgentOptions are the flags of `edgeplane agent`.
type AgentOptions struct {
	DataDir    string
	Server     string
	Token      string
	CACertHash string
	Disable    []string
	// LBServerPort is the node-local API endpoint's port on 127.0.0.1.
	LBServerPort int
	// NodeTunnel is when the servers dial the node's kubelet through a
	// tunnel the agent opens (pkg/nodetunnel): auto, always or off.
	NodeTunnel string
	Node       node.Options
}

// NewAgentOptions returns the defaults.
func NewAgentOptions() *AgentOptions {
	return &AgentOptions{DataDir: defaultDataDir(), LBServerPort: apiendpoint.DefaultPort, NodeTunnel: string(nodetunnel.ModeAuto), Node: node.NewOptions()}
}

// AddFlags binds the options to fs.
func (o *AgentOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Directory for the node's credentials, kubelet state and airgap images (<data-dir>/agent, created 0700).")
	fs.StringVar(&o.Server, "server", o.Server, "URL of a server of the cluster, https://HOST:6443.")
	fs.StringVar(&o.Token, "token", o.Token, "Node token, K10<ca-hash>::<id>.<secret>, as `edgeplane token --node` or `edgeplane token create` print on a server (default: $EDGEPLANE_TOKEN).")
	fs.StringVar(&o.CACertHash, "ca-cert-hash", o.CACertHash, "With a bare <id>.<secret> token (kubeadm's form): the cluster CA's pin, sha256:<hex>, as kubeadm's --discovery-token-ca-cert-hash.")
	fs.StringSliceVar(&o.Disable, "disable", o.Disable, "Components not to run, comma-separated (repeatable): "+strings.Join(disableable(true), ", ")+".")
	fs.IntVar(&o.LBServerPort, "lb-server-port", o.LBServerPort, "Port on 127.0.0.1 of the node-local API endpoint through which the node's parts reach every server (as k3s's agent load balancer).")
	fs.StringVar(&o.NodeTunnel, "node-tunnel", o.NodeTunnel, "When the servers reach this node's kubelet (logs, exec, attach, port-forward, metrics) through a connection the agent opens to each server: auto (when they cannot dial it directly), always, or off (docs/NODES.md, \"Edge links\").")
	o.Node.AddFlags(fs)
}

// agentCompleted are AgentOptions after Complete.
type agentCompleted struct {
	DataDir  string
	Server   string
	Token    nodetoken.Token
	Disabled map[string]bool
	// LBServerPort is the node-local API endpoint's port.
	LBServerPort int
	NodeTunnel   nodetunnel.Mode
	Node         node.Settings
	problems     []error
}

// CompletedAgentOptions are AgentOptions after Complete; Validate them before use.
type CompletedAgentOptions struct{ *agentCompleted }

// Complete parses the options; problems are kept for Validate.
func (o *AgentOptions) Complete() (CompletedAgentOptions, error) {
	c := &agentCompleted{}
	bad := func(err error) { c.problems = append(c.problems, err) }
	if o.DataDir == "" {
		bad(errors.New("--data-dir must not be empty"))
	} else if abs, err := filepath.Abs(o.DataDir); err != nil {
		bad(fmt.Errorf("--data-dir %q: %v", o.DataDir, err))
	} else {
		c.DataDir = abs
	}
	switch u, err := url.Parse(strings.TrimSpace(o.Server)); {
	case o.Server == "":
		bad(errors.New("--server is required: the URL of a server, https://HOST:6443"))
	case err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/"):
		bad(fmt.Errorf("--server %q: want https://HOST:PORT", o.Server))
	default:
		c.Server = "https://" + u.Host
	}
	if o.Token == "" {
		bad(errors.New("--token is required: run `edgeplane token --node` on a server to print one"))
	} else if t, err := nodetoken.Parse(o.Token); err != nil {
		bad(fmt.Errorf("--token: %w", err))
	} else {
		if o.CACertHash != "" {
			if t, err = t.WithCAPin(o.CACertHash); err != nil {
				bad(fmt.Errorf("--ca-cert-hash: %w", err))
			}
		}
		if err == nil && !t.Pinned() {
			bad(errors.New("--token pins no cluster CA, so the first contact could be intercepted: use the K10<ca-hash>::<id>.<secret> form that `edgeplane token --node` prints, or pass --ca-cert-hash sha256:<hex>"))
		}
		c.Token = t
	}
	if o.LBServerPort < 1 || o.LBServerPort > 65535 {
		bad(fmt.Errorf("--lb-server-port %d: want a port, 1-65535 (default %d)", o.LBServerPort, apiendpoint.DefaultPort))
	}
	c.LBServerPort = o.LBServerPort
	if m, err := nodetunnel.ParseMode(o.NodeTunnel); err != nil {
		bad(fmt.Errorf("--node-tunnel: %w", err))
	} else {
		c.NodeTunnel = m
	}
	var disableErrs []error
	c.Disabled, disableErrs = parseDisable(true, o.Disable)
	c.problems = append(c.problems, disableErrs...)
	hostname, err := node.DefaultHostname()
	if err != nil {
		return CompletedAgentOptions{}, err
	}
	var nodeErrs []error
	c.Node, nodeErrs = o.Node.Complete(hostname)
	c.problems = append(c.problems, nodeErrs...)
	return CompletedAgentOptions{c}, nil
}

// Validate returns every problem with the options.
func (c CompletedAgentOptions) Validate() []error {
	errs := slices.Clone(c.problems)
	if c.DataDir != "" {
		if err := validateNodeDir(c.DataDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// RunAgent joins this host to a cluster as a node (pkg/node) and runs it
// until ctx ends or a part of the node ends on its own. The data dir is
// locked while the agent runs, before the node's files are read: a data
// dir that exists at once, a new one once the server's CA has been checked
// against the token's pin (nothing is written before that). A server's
// data dir is locked by the server, so a stray agent there writes nothing.
// It notifies systemd once the node is Ready. The node's stop errors are
// returned.
func RunAgent(ctx context.Context, o CompletedAgentOptions) (err error) {
	logger := klog.FromContext(ctx)
	logger.Info("Starting edgeplane agent", "server", o.Server, "node", o.Node.Name)
	tuneGoRuntime(ctx, agentGCPercent, preflight.HostMemory())
	var lock *dataDirLock
	defer func() { lock.release() }()
	prepare := func() error {
		if lock != nil {
			return nil
		}
		l, err := prepareDataDir(o.DataDir)
		lock = l
		return err
	}
	if _, statErr := os.Stat(o.DataDir); statErr == nil {
		if err := prepare(); err != nil {
			return err
		}
	}
	// The node's own containerd starts once the node has joined (nothing
	// is written to a new data dir before the server's CA is checked).
	choice := node.ChooseRuntime(ctx, o.Node.RuntimeEndpoint)
	var rt *criruntime.Runtime
	if choice.Managed == nil {
		if rt, err = node.DetectRuntime(ctx, o.Node.RuntimeEndpoint); err != nil {
			return err
		}
	}
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
	logger.Info("The node's container runtime", "managed", choice.Managed != nil, "why", choice.Why)
	n, err := node.New(node.Config{
		Settings:        settings,
		Dir:             dir,
		Runtime:         rt,
		Managed:         managed,
		Credentials:     &node.TokenJoin{Server: o.Server, Token: o.Token, PrepareDir: prepare},
		Disabled:        o.Disabled,
		APIEndpointPort: o.LBServerPort,
		Tunnel:          o.NodeTunnel,
	})
	if err != nil {
		return err
	}
	var mgr component.Manager
	defer func() {
		logfilter.Stopping()
		if stopErr := mgr.StopAll(context.WithoutCancel(ctx), stopTimeout); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
	}()
	if err := mgr.StartBackground(ctx, n); err != nil {
		return err
	}
	for _, task := range agentTasks(n, o.Node.Name, func(state string) { notify(ctx, state) }, startupPagesDelay, releaseStartupPagesAfter) {
		if err := mgr.StartBackground(ctx, task); err != nil {
			return err
		}
	}
	if ended := mgr.Watch(ctx); ended != nil {
		logger.Error(ended.Err, "A component stopped on its own: shutting down", "component", ended.Component)
		return ended
	}
	logger.Info("Shutting down the agent")
	notifyStopping(ctx)
	return nil
}

// agentTasks are the loops an agent runs beside its node: READY=1 to systemd
// (reportReady, through send), and once the node runs (the first READY=1:
// Ready, or its kubelet running offline) the release of the binary's
// start-up pages after delay (release: releaseStartupPagesAfter). An agent
// maps ~135 MiB of the binary at start (package init, the first lists and
// syncs of the kubelet, kube-proxy, flannel and the NetworkPolicy
// controller) and touches a fraction of it again once running
// (docs/PERFORMANCE.md, "An agent's memory").
func agentTasks(n readyNode, name string, send func(state string), delay time.Duration, release func(context.Context, time.Duration)) []*background.Task {
	running := make(chan struct{})
	var once sync.Once
	return []*background.Task{
		background.NewTask("node-ready", func(ctx context.Context) {
			reportReady(ctx, n, name, func(state string) {
				send(state)
				once.Do(func() { close(running) })
			})
		}),
		background.NewTask("startup-pages", func(ctx context.Context) {
			select {
			case <-ctx.Done():
			case <-running:
				release(ctx, delay)
			}
		}),
	}
}

// readyNode is what reportReady needs of a node (node.Node).
type readyNode interface {
	Offline() bool
	LocalReady(ctx context.Context) error
	Ready(ctx context.Context) error
	Began() time.Time
}

var _ readyNode = (*node.Node)(nil)

// reportReady logs and sends (to systemd, Type=notify) READY=1 once the
// node is Ready. A node that started offline (no API server answered:
// node.Cluster.Offline) is not Ready before one answers, and systemd would
// end it at its start timeout and start it again, over and over, while its
// pods wait for a kubelet: it sends READY=1 once its kubelet runs, with a
// STATUS that says the node waits for a server, and the STATUS again once
// the node is Ready.
func reportReady(ctx context.Context, n readyNode, name string, send func(state string)) {
	logger := klog.FromContext(ctx)
	if n.Offline() {
		if err := n.LocalReady(ctx); err != nil {
			return
		}
		logger.Info(fmt.Sprintf("edgeplane agent running in %.1f s: node %s runs its kubelet, and is Ready once an API server answers", time.Since(n.Began()).Seconds(), name))
		send(sdnotify.Ready + "\nSTATUS=node " + name + " runs its kubelet; waiting for an API server")
	}
	if err := n.Ready(ctx); err == nil {
		logger.Info(fmt.Sprintf("edgeplane agent ready in %.1f s: node %s is Ready", time.Since(n.Began()).Seconds(), name))
		send(sdnotify.Ready + "\nSTATUS=node " + name + " is Ready")
	}
}
