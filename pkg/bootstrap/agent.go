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
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/pkg/agent"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
	"github.com/edgeplane/edgeplane/pkg/flannel"
	"github.com/edgeplane/edgeplane/pkg/kubelet"
	"github.com/edgeplane/edgeplane/pkg/kubeproxy"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
	"github.com/edgeplane/edgeplane/pkg/sdnotify"
)

// AgentOptions are the flags of `edgeplane agent`.
type AgentOptions struct {
	DataDir    string
	Server     string
	Token      string
	CACertHash string
	Disable    []string
	Node       NodeOptions
}

// NewAgentOptions returns the defaults.
func NewAgentOptions() *AgentOptions {
	return &AgentOptions{DataDir: defaultDataDir(), Node: newNodeOptions()}
}

// AddFlags binds the options to fs.
func (o *AgentOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Directory for the node's credentials, kubelet state and airgap images (<data-dir>/agent, created 0700).")
	fs.StringVar(&o.Server, "server", o.Server, "URL of a server of the cluster, https://HOST:6443.")
	fs.StringVar(&o.Token, "token", o.Token, "Node token, K10<ca-hash>::<id>.<secret>, as `edgeplane token --node` or `edgeplane token create` print on a server (default: $EDGEPLANE_TOKEN).")
	fs.StringVar(&o.CACertHash, "ca-cert-hash", o.CACertHash, "With a bare <id>.<secret> token (kubeadm's form): the cluster CA's pin, sha256:<hex>, as kubeadm's --discovery-token-ca-cert-hash.")
	fs.StringSliceVar(&o.Disable, "disable", o.Disable, "Components not to run, comma-separated (repeatable): "+strings.Join(agentDisableable, ", ")+".")
	o.Node.AddFlags(fs)
}

// agentCompleted are AgentOptions after Complete.
type agentCompleted struct {
	DataDir  string
	Server   string
	Token    nodetoken.Token
	Disabled map[string]bool
	Node     nodeCompleted
	problems []error
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
	var disableErrs []error
	c.Disabled, disableErrs = parseDisableOf(agentDisableable, o.Disable)
	c.problems = append(c.problems, disableErrs...)
	hostname, err := defaultHostname()
	if err != nil {
		return CompletedAgentOptions{}, err
	}
	var nodeErrs []error
	c.Node, nodeErrs = o.Node.complete(hostname)
	c.problems = append(c.problems, nodeErrs...)
	return CompletedAgentOptions{c}, nil
}

// Validate returns every problem with the options.
func (c CompletedAgentOptions) Validate() []error {
	errs := slices.Clone(c.problems)
	k := c.Node.kubeletOptions(agent.PathsIn("/"), "unix:///x", "/x", nodeconfig.Config{ClusterDomain: "cluster.local"})
	for _, err := range k.Validate() {
		errs = append(errs, err)
	}
	if c.DataDir != "" {
		if err := kubelet.ValidateRootDir(agent.PathsIn(filepath.Join(c.DataDir, agentDirName)).RootDir, "--data-dir"); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// RunAgent joins this host to a cluster as a node and runs its kubelet until
// ctx ends or the kubelet stops. In order: the cluster CA is discovered with
// the token and checked against its pin (nothing is written before), the
// node's credentials and the cluster's node settings are fetched, the
// container runtime is found, the airgap images imported, and the kubelet
// started; the pod network is written when the node gets a pod CIDR. It
// notifies systemd once the node is Ready.
func RunAgent(ctx context.Context, o CompletedAgentOptions) error {
	logger := klog.FromContext(ctx)
	begin := time.Now()
	logger.Info("Starting edgeplane agent", "server", o.Server, "node", o.Node.Name)
	paths := agent.PathsIn(filepath.Join(o.DataDir, agentDirName))

	nc, err := agent.Join(ctx, agent.JoinConfig{Server: o.Server, Token: o.Token, NodeName: o.Node.Name, Paths: paths})
	if err != nil {
		return err
	}
	lock, err := prepareDataDir(paths.Dir)
	if err != nil {
		return err
	}
	defer lock.release()

	rt, err := criruntime.Detect(ctx, o.Node.RuntimeEndpoint)
	if err != nil {
		return err
	}
	for _, w := range rt.Warnings {
		logger.Info("Container runtime: "+w, "runtime", rt.Name, "version", rt.Version)
	}
	kopts := o.Node.kubeletOptions(paths, rt.Endpoint, paths.ClientCA, nc)
	kopts.BootstrapKubeconfig = paths.BootstrapKubeconfig
	k, err := kubelet.New(kopts)
	if err != nil {
		return err
	}
	network, err := nodeNetwork(ctx, o.Node, paths, agentNetwork(nc), nc.ClusterCIDR)
	if err != nil {
		return err
	}
	var mgr manager
	defer func() { _ = mgr.stopAll(context.WithoutCancel(ctx), stopTimeout) }()
	components := append([]Component{
		&agent.Images{Dir: paths.Images, RuntimeEndpoint: rt.Endpoint, Pinned: []string{o.Node.PauseImage}},
		k,
	}, network...)
	if np := networkPolicy(ctx, o.Disabled[componentNetworkPolicy], o.Node.Name, paths.Kubeconfig); np != nil {
		components = append(components, np)
	}
	for _, c := range components {
		if err := mgr.start(ctx, c, stopTimeout); err != nil {
			return err
		}
	}

	nodeReady := background.NewTask("node-ready", func(taskCtx context.Context) {
		if err := waitNodeReady(taskCtx, paths.Kubeconfig, o.Node.Name); err == nil {
			logger.Info(fmt.Sprintf("edgeplane agent ready in %.1f s: node %s is Ready", time.Since(begin).Seconds(), o.Node.Name))
			notify(ctx, sdnotify.Ready+"\nSTATUS=node "+o.Node.Name+" is Ready")
		}
	})
	if err := mgr.startBackground(ctx, nodeReady); err != nil {
		return err
	}
	if ended := mgr.watch(ctx); ended != nil { // the kubelet
		logger.Error(ended.Err, "A component stopped on its own: shutting down", "component", ended.Component)
		return ended
	}
	logger.Info("Shutting down the agent")
	notifyStopping(ctx)
	return nil
}

// agentNetwork is the server's choice of cluster network; a server that
// published none (older than the network parts) runs neither.
func agentNetwork(nc nodeconfig.Config) networkCompleted {
	n := networkCompleted{FlannelBackend: nc.FlannelBackend, KubeProxyMode: nc.KubeProxyMode}
	if n.FlannelBackend == "" || flannel.ValidateBackend(n.FlannelBackend) != nil || flannelCIDR(nc.ClusterCIDR) == "" {
		n.FlannelBackend = flannel.BackendNone
	}
	if kubeproxy.ValidateMode(n.KubeProxyMode) != nil {
		n.KubeProxyMode = ""
	}
	return n
}

// waitNodeReady polls the node's Ready condition with the node's own
// credentials (the kubeconfig TLS bootstrap writes).
func waitNodeReady(ctx context.Context, kubeconfig, node string) error {
	var client kubernetes.Interface // built once the kubeconfig is there
	return wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if client == nil {
			if _, err := os.Stat(kubeconfig); err != nil {
				return false, nil
			}
			c, err := adminClient(kubeconfig)
			if err != nil {
				return false, nil
			}
			client = c
		}
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}
