// Package kubelet runs the upstream kubelet (k8s.io/kubernetes/cmd/kubelet/app
// at go.mod's version) inside the edgeplane process, for `edgeplane agent`
// and for a server that is its own node.
//
// The kubelet is driven through its option structs and app.Run, never through
// NewKubeletCommand: that one installs the API server's process-wide signal
// handler (which panics when set up twice in one process) and parses the
// process's own flags. edgeplane fills upstream's KubeletFlags and
// KubeletConfiguration in Go, as the flags and config file would, then lets
// --kubelet-arg values override any of them through upstream's own flag set,
// so every kubelet flag a user knows keeps its meaning and its validation.
package kubelet

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	netutils "k8s.io/utils/net"
)

// Default ports, as upstream's.
const (
	DefaultPort        = 10250
	DefaultHealthzPort = 10248
)

// longestSocket is the longest unix socket path the kubelet makes below its
// root dir (the device manager's; pod-resources binds a temporary
// "pod-resources/<10 digits>" first, which is shorter). A bind to a path
// longer than sun_path allows makes the upstream kubelet end the process
// ("Failed to create listener for podResources endpoint ... bind: invalid
// argument"), control plane and all, so a root dir too long for it is
// refused before anything starts.
const longestSocket = "/device-plugins/kubelet.sock"

// maxUnixPath is the usable length of sockaddr_un.sun_path on Linux.
const maxUnixPath = 107

// ValidateRootDir reports a kubelet root dir whose unix sockets would not
// fit in a socket address; dataDirFlag names the flag that sets it.
func ValidateRootDir(rootDir, dataDirFlag string) error {
	if n := len(rootDir) + len(longestSocket); n > maxUnixPath {
		return fmt.Errorf("%s: the kubelet's root dir %s is %d bytes long, and its unix sockets below it (%s) would be %d, over Linux's limit of %d: use a data dir at most %d bytes shorter",
			dataDirFlag, rootDir, len(rootDir), longestSocket[1:], n, maxUnixPath, n-maxUnixPath)
	}
	return nil
}

// Options is what edgeplane decides for its kubelet. The paths are absolute.
type Options struct {
	// NodeName is the Node's name (the kubelet's --hostname-override).
	NodeName string
	// NodeIPs are the node's addresses (--node-ip), at most one per family;
	// empty lets the kubelet choose.
	NodeIPs []net.IP
	// NodeLabels are set when the node registers (--node-labels).
	NodeLabels map[string]string
	// NodeTaints are set when the node registers (--register-with-taints).
	NodeTaints []corev1.Taint

	// RootDir is the kubelet's --root-dir: pods' volumes and plugin state.
	RootDir string
	// CertDir holds the rotated client and serving certificates.
	CertDir string
	// Kubeconfig is the kubelet's own kubeconfig. Written by TLS bootstrap
	// from BootstrapKubeconfig when that is set, else it must exist.
	Kubeconfig string
	// BootstrapKubeconfig is a bootstrap-token kubeconfig (agent), or empty
	// when Kubeconfig already holds node credentials (server).
	BootstrapKubeconfig string
	// ClientCAFile is the CA of clients allowed to call the kubelet's API
	// (the API server's kubelet client certificate chains to it).
	ClientCAFile string
	// ServingCertFile and ServingKeyFile are the kubelet's serving
	// certificate (a server's own node: the server mints and renews it,
	// the kubelet reloads the files). Empty: the kubelet asks for one
	// through a kubelet-serving CSR and rotates it.
	ServingCertFile string
	ServingKeyFile  string
	// InServer: the kubelet runs in a server's process, where feature
	// gates are the API server's too.
	InServer bool

	// RuntimeEndpoint is the CRI socket, "unix:///run/containerd/containerd.sock".
	RuntimeEndpoint string
	// CgroupDriver is "cgroupfs" or "systemd"; empty means cgroupfs, which
	// matches containerd's default runc options (SystemdCgroup = false).
	CgroupDriver string

	// ClusterDomain and ClusterDNS fill the pods' resolv.conf.
	ClusterDomain string
	ClusterDNS    []net.IP
	// NodeLeaseDuration is the node Lease's duration, renewed every quarter
	// of it (the cluster's --node-heartbeat); 0 keeps the kubelet's 40 s.
	NodeLeaseDuration time.Duration

	// Port and HealthzPort; 0 means the upstream defaults.
	Port        int32
	HealthzPort int32

	// AllowPrivileged lets the kubelet run privileged containers: the
	// server's --allow-privileged, which its API server enforces on every
	// pod it admits; the kubelet enforces it on static pods.
	AllowPrivileged bool

	// PodLogsDir is where containers' logs go (KubeletConfiguration
	// podLogsDir); empty means upstream's /var/log/pods.
	PodLogsDir string

	// ExtraArgs are kubelet flags, "name=value" or "name" (--kubelet-arg),
	// applied last: they override everything above.
	ExtraArgs []string
}

// Validate reports every problem with o at once.
func (o *Options) Validate() []error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("kubelet: no node name"))
	} else if msgs := validation.IsDNS1123Subdomain(o.NodeName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--node-name %q is not a valid node name: %s", o.NodeName, strings.Join(msgs, "; ")))
	}
	if len(o.NodeIPs) > 2 {
		errs = append(errs, fmt.Errorf("--node-ip: at most one IPv4 and one IPv6 address, got %d", len(o.NodeIPs)))
	} else if len(o.NodeIPs) == 2 && netutils.IsIPv4(o.NodeIPs[0]) == netutils.IsIPv4(o.NodeIPs[1]) {
		errs = append(errs, fmt.Errorf("--node-ip: two addresses must be one IPv4 and one IPv6, got %s and %s", o.NodeIPs[0], o.NodeIPs[1]))
	}
	for _, ip := range o.NodeIPs {
		if ip.IsUnspecified() || ip.IsMulticast() {
			errs = append(errs, fmt.Errorf("--node-ip %s is not a usable node address", ip))
		}
	}
	for name, path := range map[string]string{
		"root dir": o.RootDir, "cert dir": o.CertDir, "kubeconfig": o.Kubeconfig, "client CA file": o.ClientCAFile,
	} {
		if path == "" {
			errs = append(errs, fmt.Errorf("kubelet: no %s", name))
		} else if !filepath.IsAbs(path) {
			errs = append(errs, fmt.Errorf("kubelet: %s %q is not an absolute path", name, path))
		}
	}
	if filepath.IsAbs(o.RootDir) {
		if err := ValidateRootDir(o.RootDir, "kubelet"); err != nil {
			errs = append(errs, err)
		}
	}
	if o.RuntimeEndpoint == "" {
		errs = append(errs, errors.New("kubelet: no container runtime endpoint"))
	}
	switch o.CgroupDriver {
	case "", "cgroupfs", "systemd":
	default:
		errs = append(errs, fmt.Errorf("kubelet: cgroup driver %q: use cgroupfs or systemd", o.CgroupDriver))
	}
	for _, p := range []struct {
		name string
		port int32
	}{{"port", o.Port}, {"healthz port", o.HealthzPort}} {
		if p.port < 0 || p.port > 65535 {
			errs = append(errs, fmt.Errorf("kubelet: %s %d is out of range", p.name, p.port))
		}
	}
	for _, a := range o.ExtraArgs {
		arg, err := splitArg(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "="); o.InServer && name == "feature-gates" {
			errs = append(errs, fmt.Errorf("--kubelet-arg %s: on a server that is its own node the kubelet runs in the API server's process, whose feature gates it would change too; run what needs the gate on an agent", a))
		}
	}
	if (o.ServingCertFile == "") != (o.ServingKeyFile == "") {
		errs = append(errs, errors.New("kubelet: a serving certificate needs both its certificate and its key file"))
	}
	return errs
}

// ParseTaint parses "key=value:Effect" or "key:Effect", as --register-with-taints.
func ParseTaint(s string) (corev1.Taint, error) {
	kv, effect, ok := strings.Cut(s, ":")
	if !ok {
		return corev1.Taint{}, fmt.Errorf("taint %q: want key=value:Effect or key:Effect", s)
	}
	key, value, _ := strings.Cut(kv, "=")
	t := corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)}
	switch t.Effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return corev1.Taint{}, fmt.Errorf("taint %q: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", s, effect)
	}
	if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
		return corev1.Taint{}, fmt.Errorf("taint %q: key: %s", s, strings.Join(msgs, "; "))
	}
	if value != "" {
		if msgs := validation.IsValidLabelValue(value); len(msgs) > 0 {
			return corev1.Taint{}, fmt.Errorf("taint %q: value: %s", s, strings.Join(msgs, "; "))
		}
	}
	return t, nil
}

// ParseLabel parses "key=value", as --node-labels.
func ParseLabel(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("label %q: want key=value", s)
	}
	if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
		return "", "", fmt.Errorf("label %q: key: %s", s, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsValidLabelValue(value); len(msgs) > 0 {
		return "", "", fmt.Errorf("label %q: value: %s", s, strings.Join(msgs, "; "))
	}
	return key, value, nil
}

// splitArg splits a --kubelet-arg value into a flag argument "--name=value".
func splitArg(a string) (string, error) {
	a = strings.TrimLeft(strings.TrimSpace(a), "-")
	name, _, _ := strings.Cut(a, "=")
	if name == "" {
		return "", fmt.Errorf("--kubelet-arg %q: want name=value (a kubelet flag without its dashes)", a)
	}
	return "--" + a, nil
}
