package node

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/criruntime"
	"github.com/edgeplane/edgeplane/pkg/kubelet"
	"github.com/edgeplane/edgeplane/pkg/localstorage"
	"github.com/edgeplane/edgeplane/pkg/netpol"
)

// The --disable names of a node's parts. The kubelet is a server's own node
// as a whole; flannel and kube-proxy are the cluster's choice, turned off
// on the server for every node; the NetworkPolicy controller is each node's.
const (
	PartKubelet       = "kubelet"
	PartFlannel       = "flannel"
	PartKubeProxy     = "kube-proxy"
	PartNetworkPolicy = netpol.ComponentName
	PartLocalStorage  = localstorage.ComponentName
)

// DetectRuntime finds the node's container runtime (endpoint, or the usual
// sockets when empty) and logs what it warns about.
func DetectRuntime(ctx context.Context, endpoint string) (*criruntime.Runtime, error) {
	rt, err := criruntime.Detect(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	for _, w := range rt.Warnings {
		klog.FromContext(ctx).Info("Container runtime: "+w, "runtime", rt.Name, "version", rt.Version)
	}
	return rt, nil
}

// KubeletOptions fills the kubelet's options for this node.
func (c Config) KubeletOptions(p Paths, cluster Cluster) kubelet.Options {
	s := c.Settings
	o := kubelet.Options{
		NodeName:        s.Name,
		NodeIPs:         s.IPs,
		NodeLabels:      s.Labels,
		NodeTaints:      s.Taints,
		RootDir:         p.RootDir,
		CertDir:         p.CertDir,
		Kubeconfig:      p.Kubeconfig,
		ClientCAFile:    cluster.ClientCAFile,
		ServingCertFile: cluster.ServingCertFile,
		ServingKeyFile:  cluster.ServingKeyFile,
		ClusterDomain:   cluster.ClusterDomain,
		ClusterDNS:      cluster.ClusterDNS,
		PodLogsDir:      s.PodLogsDir,
		ExtraArgs:       s.KubeletArgs,
		InServer:        c.InServer,

		NodeLeaseDuration: cluster.NodeLeaseDuration,
		AllowPrivileged:   cluster.AllowPrivileged,
	}
	switch {
	case c.Runtime != nil:
		o.RuntimeEndpoint = c.Runtime.Endpoint
		o.CgroupDriver = cgroupDriver(c.Runtime.CgroupDriver)
	case c.Managed != nil:
		// Before the managed containerd answers (New checks the options
		// then): its socket and the driver it is configured with.
		o.RuntimeEndpoint = c.Managed.Endpoint()
		o.CgroupDriver = c.Managed.CgroupDriver()
	}
	return o
}

// cgroupDriver is the kubelet's cgroup driver for the one the runtime
// reports: the two must agree, or pods fail to start. A runtime that does
// not say (containerd 1.6) gets the kubelet's default, cgroupfs, which is
// containerd's default too; --kubelet-arg=cgroup-driver=... overrides.
func cgroupDriver(reported string) string {
	switch reported {
	case "systemd", "cgroupfs":
		return reported
	}
	return ""
}
