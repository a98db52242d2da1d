package node

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/edgeplane/edgeplane/pkg/cni"
	"github.com/edgeplane/edgeplane/pkg/containerd"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
	"k8s.io/klog/v2"
)

// RuntimeChoice is which container runtime a node runs pods with, and why.
type RuntimeChoice struct {
	// Managed is the containerd edgeplane runs for the node (pkg/containerd);
	// nil: a runtime of the host's, at Endpoint.
	Managed *containerd.Binary
	// Endpoint is the host runtime's socket, from
	// --container-runtime-endpoint; "": the usual sockets are searched.
	Endpoint string
	// Why says why, in one sentence.
	Why string
}

// ChooseRuntime decides which runtime a node uses: the one
// --container-runtime-endpoint names; else a containerd of edgeplane's own
// when a containerd binary is beside edgeplane or on the PATH and is a
// version edgeplane configures; else the host's runtime at the usual
// sockets (criruntime.Detect).
func ChooseRuntime(ctx context.Context, endpoint string) RuntimeChoice {
	if endpoint != "" {
		return RuntimeChoice{Endpoint: endpoint, Why: "--container-runtime-endpoint names it"}
	}
	b, err := containerd.FindBinary(ctx)
	if err != nil {
		return RuntimeChoice{Why: fmt.Sprintf("edgeplane runs no containerd of its own (%v): the host's runtime is looked for at the usual sockets", err)}
	}
	return RuntimeChoice{Managed: b, Why: fmt.Sprintf("no --container-runtime-endpoint, and containerd %s is %s (%s): edgeplane runs it (pass --container-runtime-endpoint to use a runtime of the host's instead)",
		b.Version, b.Where, b.Path)}
}

// NewManagedContainerd is the node's own containerd under p.Containerd,
// configured for the node's settings: the kubelet's cgroup driver, the
// node's CNI directories, its sandbox image, and the registries' certs.d
// tree and credentials.
func NewManagedContainerd(ctx context.Context, s Settings, p Paths, b *containerd.Binary) (*containerd.Containerd, error) {
	driver, err := ManagedCgroupDriver(s.KubeletArgs)
	if err != nil {
		return nil, err
	}
	binDir, err := cni.FindPluginDir()
	if err != nil {
		// The pod network part says so when it starts; pods on the host
		// network run without the plugins.
		binDir = cni.PluginDirs[0]
	}
	var (
		auths      []containerd.RegistryAuth
		writeHosts func(string) error
	)
	if s.Registries != nil {
		for _, a := range s.Registries.Auths() {
			auths = append(auths, containerd.RegistryAuth(a))
		}
		for _, w := range s.Registries.Warnings() {
			klog.FromContext(ctx).Info("Registries file: "+w, "file", s.Registries.File)
		}
		writeHosts = s.Registries.WriteHosts
	}
	return containerd.New(ctx, containerd.Config{
		Dir:              p.Containerd,
		Binary:           b,
		CgroupDriver:     driver,
		SandboxImage:     s.PauseImage,
		CNIBinDir:        binDir,
		CNIConfDir:       s.CNIConfDir,
		RegistryHostsDir: p.ContainerdCerts,
		RegistryAuths:    auths,
		// WriteHosts also removes the hosts it wrote before that the
		// file no longer names.
		WriteRegistryHosts: writeHosts,
	})
}

// ManagedCgroupDriver is the cgroup driver of the kubelet and of the
// managed containerd's runc, which must agree: --kubelet-arg=cgroup-driver
// (in kubeletArgs) when given; else systemd on a host that systemd runs with the unified
// cgroup hierarchy (v2), where systemd expects to be the one writer of
// the cgroup tree; else cgroupfs (cgroup v1, or no systemd), the kubelet's
// and containerd's default.
func ManagedCgroupDriver(kubeletArgs []string) (string, error) {
	for _, a := range kubeletArgs {
		if v, ok := strings.CutPrefix(a, "cgroup-driver="); ok {
			if v != "systemd" && v != "cgroupfs" {
				return "", fmt.Errorf("--kubelet-arg=cgroup-driver=%s: want systemd or cgroupfs", v)
			}
			return v, nil
		}
	}
	mode, err := criruntime.HostCgroups("")
	if err == nil && mode.V2() && systemdRuns() {
		return "systemd", nil
	}
	return "cgroupfs", nil
}

// systemdRuns: systemd is the host's init (sd_booted's test).
func systemdRuns() bool {
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}
