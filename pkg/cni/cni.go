// Package cni gives pods a network on a node: it finds the standard CNI
// reference plugins (bridge, host-local, portmap, loopback) on the host and
// writes the network configuration the container runtime reads, for the
// node's pod CIDRs, once the node IPAM controller has given the Node them.
package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

// Defaults, as the runtimes' own: containerd and CRI-O read /etc/cni/net.d.
const (
	DefaultConfDir = "/etc/cni/net.d"
	// ConfFileName sorts before most other networks' files: the runtime uses
	// the first file in name order.
	ConfFileName = "10-edgeplane.conflist"
	// NetworkName is the network's name in the conflist.
	NetworkName = "edgeplane"
	// DefaultBridge is the Linux bridge the pods are attached to.
	DefaultBridge = "cni0"
)

// PluginDirs are where distributions install the reference plugins: the
// upstream tarball's /opt/cni/bin and Debian's containernetworking-plugins
// (/usr/lib/cni).
var PluginDirs = []string{"/opt/cni/bin", "/usr/lib/cni"}

// requiredPlugins are the plugins the written configuration uses.
var requiredPlugins = []string{"bridge", "host-local", "portmap", "loopback"}

// ErrNoPlugins means no directory holds the reference plugins.
var ErrNoPlugins = errors.New("the CNI reference plugins (bridge, host-local, portmap, loopback) are not installed")

// FindPluginDir returns the first directory of dirs (PluginDirs when empty)
// that holds every plugin the configuration uses.
func FindPluginDir(dirs ...string) (string, error) {
	if len(dirs) == 0 {
		dirs = PluginDirs
	}
	var missing []string
	for _, dir := range dirs {
		var lack []string
		for _, p := range requiredPlugins {
			if info, err := os.Stat(filepath.Join(dir, p)); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
				lack = append(lack, p)
			}
		}
		if len(lack) == 0 {
			return dir, nil
		}
		missing = append(missing, fmt.Sprintf("%s lacks %s", dir, strings.Join(lack, ", ")))
	}
	return "", fmt.Errorf("%w (%s): install them (Debian/Ubuntu/Raspberry Pi OS: apt-get install containernetworking-plugins) or put them in /opt/cni/bin", ErrNoPlugins, strings.Join(missing, "; "))
}

// Config is one node's pod network.
type Config struct {
	// PodCIDRs are the Node's spec.podCIDRs (one per IP family).
	PodCIDRs []string
	// Bridge is the bridge's name; empty means DefaultBridge.
	Bridge string
	// MTU of the pods' interfaces; 0 lets the plugin choose.
	MTU int
	// NoMasquerade leaves masquerading to the pod network across nodes
	// (flannel masquerades only what leaves the cluster CIDR, so pod to pod
	// across nodes keeps its source address). Without it the bridge
	// masquerades everything that leaves the node's pod CIDR.
	NoMasquerade bool
	// IPAMDataDir is host-local's state directory (it keeps the network's
	// reservations in IPAMDataDir/<NetworkName>): the node's own, so that
	// two nodes on one host do not share one; empty leaves the plugin's
	// default, LegacyIPAMDataDir.
	IPAMDataDir string
}

// Render returns the conflist for c: a bridge with the node's pod CIDRs from
// host-local (its state in c.IPAMDataDir), the bridge as the pods' gateway, masquerading for traffic that
// leaves the pod network, and portmap for hostPort.
func Render(c Config) ([]byte, error) {
	if len(c.PodCIDRs) == 0 {
		return nil, errors.New("cni: the node has no pod CIDR")
	}
	bridge := c.Bridge
	if bridge == "" {
		bridge = DefaultBridge
	}
	var ranges [][]map[string]string
	for _, s := range c.PodCIDRs {
		_, cidr, err := netutils.ParseCIDRSloppy(s)
		if err != nil {
			return nil, fmt.Errorf("cni: pod CIDR %q: %v", s, err)
		}
		ranges = append(ranges, []map[string]string{{"subnet": cidr.String()}})
	}
	// isDefaultGateway gives the bridge the range's gateway address and the
	// pods their default route through it (an ipam route to 0.0.0.0/0 as
	// well would be added twice and fail with "file exists").
	ipam := map[string]any{
		"type":   "host-local",
		"ranges": ranges,
	}
	if c.IPAMDataDir != "" {
		ipam["dataDir"] = c.IPAMDataDir
	}
	bridgePlugin := map[string]any{
		"type":             "bridge",
		"bridge":           bridge,
		"isDefaultGateway": true,
		"ipMasq":           !c.NoMasquerade,
		"hairpinMode":      true,
		"ipam":             ipam,
	}
	if c.MTU > 0 {
		bridgePlugin["mtu"] = c.MTU
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       NetworkName,
		"plugins": []any{
			bridgePlugin,
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "snat": true},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// Write writes the conflist into dir atomically (a temp file in dir, fsync,
// rename, fsync of dir), unless the file already holds exactly that.
// changed tells whether it wrote.
func Write(dir string, c Config) (changed bool, err error) {
	data, err := Render(c)
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("cni: %w", err)
	}
	changed, err = atomicfile.Write(filepath.Join(dir, ConfFileName), data, 0o644)
	if err != nil {
		return false, fmt.Errorf("cni: %w", err)
	}
	return changed, nil
}

// WaitForPodCIDRs polls the Node until it has pod CIDRs (the node IPAM
// controller gives them shortly after the node registers) and returns them.
// It logs once when the wait gets long, not on every poll.
func WaitForPodCIDRs(ctx context.Context, client kubernetes.Interface, node string) ([]string, error) {
	logger := klog.FromContext(ctx)
	begin := time.Now()
	warned := false
	var cidrs []string
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err == nil:
			cidrs = podCIDRs(n)
		case apierrors.IsNotFound(err), kubeclient.Transient(err):
		default:
			return false, fmt.Errorf("cni: reading node %s: %w", node, err)
		}
		if len(cidrs) > 0 {
			return true, nil
		}
		if !warned && time.Since(begin) > 30*time.Second {
			warned = true
			logger.Info("Waiting for the node's pod CIDR: is node CIDR allocation on in the server (--allocate-node-cidrs)?", "node", node)
		}
		return false, nil
	})
	return cidrs, err
}

func podCIDRs(n *corev1.Node) []string {
	if len(n.Spec.PodCIDRs) > 0 {
		return n.Spec.PodCIDRs
	}
	if n.Spec.PodCIDR != "" {
		return []string{n.Spec.PodCIDR}
	}
	return nil
}
