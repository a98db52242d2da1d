package node

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/edgeplane/edgeplane/pkg/cni"
	"github.com/edgeplane/edgeplane/pkg/kubelet"
	"github.com/edgeplane/edgeplane/pkg/pauseimage"
	"github.com/edgeplane/edgeplane/pkg/registries"
)

// defaultPauseImage is the pause image embedded in edgeplane, imported
// into the runtime when the node starts (pkg/pauseimage).
const defaultPauseImage = pauseimage.Name

// Options are the flags of a node, shared by `edgeplane agent` and by a
// server that is its own node.
type Options struct {
	NodeName        string
	NodeIPs         []string
	NodeLabels      []string
	NodeTaints      []string
	RuntimeEndpoint string
	KubeletArgs     []string
	CNIConfDir      string
	PauseImage      string
	PodLogsDir      string
	RegistriesFile  string
}

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{CNIConfDir: cni.DefaultConfDir, PauseImage: defaultPauseImage, RegistriesFile: registries.DefaultFile}
}

// AddFlags binds the node's flags to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of this node (default: the host name, in lower case).")
	fs.StringSliceVar(&o.NodeIPs, "node-ip", o.NodeIPs, "IP address of this node (an IPv4 and an IPv6 address for dual stack; default: the address of the default route's interface).")
	fs.StringArrayVar(&o.NodeLabels, "node-label", o.NodeLabels, "Label key=value set on the node when it registers (repeatable).")
	fs.StringArrayVar(&o.NodeTaints, "node-taint", o.NodeTaints, "Taint key=value:Effect set on the node when it registers (repeatable).")
	fs.StringVar(&o.RuntimeEndpoint, "container-runtime-endpoint", o.RuntimeEndpoint, "CRI socket of the container runtime, unix:///path (default: containerd's or CRI-O's usual socket, whichever answers).")
	fs.StringArrayVar(&o.KubeletArgs, "kubelet-arg", o.KubeletArgs, "Kubelet flag name=value, without dashes (repeatable); overrides edgeplane's setting of it.")
	fs.StringVar(&o.CNIConfDir, "cni-conf-dir", o.CNIConfDir, "Directory the container runtime reads CNI network configurations from; edgeplane writes the node's pod network there.")
	fs.StringVar(&o.PodLogsDir, "pod-logs-dir", o.PodLogsDir, "Directory of the containers' log files (the kubelet's podLogsDir; default /var/log/pods). Two nodes on one host need one each: each kubelet removes the other's logs.")
	fs.StringVar(&o.RegistriesFile, "registries-file", o.RegistriesFile, "Registry mirrors and credentials of the node's managed containerd, in k3s's registries.yaml format (docs/REGISTRIES.md); a missing file means none.")
	fs.StringVar(&o.PauseImage, "pause-image", o.PauseImage, "Sandbox (pause) image the container runtime is configured with (containerd: sandbox_image). The default is the pause image inside edgeplane, imported at start and again whenever image garbage collection removed it; another image comes from the airgap directory (pinned there) or a registry.")
}

// Settings are parsed Options: this node's own settings.
type Settings struct {
	Name            string
	IPs             []net.IP
	Labels          map[string]string
	Taints          []corev1.Taint
	RuntimeEndpoint string
	KubeletArgs     []string
	CNIConfDir      string
	PauseImage      string
	PodLogsDir      string
	// Registries is the parsed --registries-file (empty when there is no
	// file): hosts.toml files (WriteHosts) and CRI auth entries (Auths)
	// for a managed containerd.
	Registries *registries.Registries
}

// Complete parses the node options; hostname is the default node name.
// Every problem is returned.
func (o *Options) Complete(hostname string) (Settings, []error) {
	var errs []error
	c := Settings{
		Name:        strings.ToLower(strings.TrimSpace(o.NodeName)),
		Labels:      map[string]string{},
		KubeletArgs: o.KubeletArgs,
		PauseImage:  strings.TrimSpace(o.PauseImage),
	}
	if c.Name == "" {
		c.Name = strings.ToLower(hostname)
	}
	for _, s := range o.NodeIPs {
		ip := net.ParseIP(strings.TrimSpace(s))
		if ip == nil {
			errs = append(errs, fmt.Errorf("--node-ip %q is not an IP address", s))
			continue
		}
		c.IPs = append(c.IPs, ip)
	}
	for _, s := range o.NodeLabels {
		k, v, err := kubelet.ParseLabel(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--node-label: %w", err))
			continue
		}
		c.Labels[k] = v
	}
	for _, s := range o.NodeTaints {
		t, err := kubelet.ParseTaint(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--node-taint: %w", err))
			continue
		}
		c.Taints = append(c.Taints, t)
	}
	errs = append(errs, kubelet.ValidateArgs(o.KubeletArgs)...)
	if ep := strings.TrimSpace(o.RuntimeEndpoint); ep != "" {
		if !strings.Contains(ep, "://") {
			ep = "unix://" + ep
		}
		if !strings.HasPrefix(ep, "unix://") {
			errs = append(errs, fmt.Errorf("--container-runtime-endpoint %q: give a unix socket, unix:///run/containerd/containerd.sock", o.RuntimeEndpoint))
		}
		c.RuntimeEndpoint = ep
	}
	if dir := strings.TrimSpace(o.CNIConfDir); dir == "" {
		errs = append(errs, fmt.Errorf("--cni-conf-dir must not be empty"))
	} else if abs, err := filepath.Abs(dir); err != nil {
		errs = append(errs, fmt.Errorf("--cni-conf-dir %q: %v", dir, err))
	} else {
		c.CNIConfDir = abs
	}
	if dir := strings.TrimSpace(o.PodLogsDir); dir != "" {
		if !filepath.IsAbs(dir) {
			errs = append(errs, fmt.Errorf("--pod-logs-dir %q must be an absolute path", o.PodLogsDir))
		} else {
			c.PodLogsDir = filepath.Clean(dir)
		}
	}
	if file := strings.TrimSpace(o.RegistriesFile); file != "" {
		r, err := registries.Load(file)
		if err != nil {
			errs = append(errs, fmt.Errorf("--registries-file: %w", err))
		}
		c.Registries = r
	}
	if c.Registries == nil {
		c.Registries = &registries.Registries{}
	}
	return c, errs
}

// DefaultHostname is the host's name, for the default node name.
func DefaultHostname() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("read the hostname: %w", err)
	}
	return h, nil
}

// WithDefaultIP is s with the host's primary address (the default route's
// interface, as the kubelet would fall back to) as its IP when it has
// none. The kubelet gets it explicitly: without one it first looks its
// node name up in DNS, which on a host without a working resolver (an
// edge site offline, a network namespace) costs ~10 s per lookup at
// registration, and a server's serving certificate must name the address
// the kubelet reports.
func (s Settings) WithDefaultIP() (Settings, error) {
	if len(s.IPs) > 0 {
		return s, nil
	}
	ip, err := utilnet.ChooseHostInterface()
	if err != nil {
		return s, fmt.Errorf("no --node-ip given and no host address found (%v): pass --node-ip", err)
	}
	s.IPs = []net.IP{ip}
	return s, nil
}
