package kubelet

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
	kubeletoptions "k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
)

// unsupportedArgs are kubelet flags --kubelet-arg cannot take: upstream reads
// their files in its command, which edgeplane does not run.
var unsupportedArgs = map[string]string{
	"config":     "a kubelet config file is read by the kubelet command, which edgeplane does not run: pass its settings as --kubelet-arg flags",
	"config-dir": "kubelet drop-in config files are read by the kubelet command, which edgeplane does not run: pass their settings as --kubelet-arg flags",
}

// server builds the upstream KubeletServer: upstream defaults, then
// edgeplane's settings, then ExtraArgs through upstream's own flag set.
// cgroupV2 tells whether the host has the unified cgroup hierarchy.
func (o *Options) server(logger klog.Logger, cgroupV2 bool) (*kubeletoptions.KubeletServer, error) {
	s, err := kubeletoptions.NewKubeletServer()
	if err != nil {
		return nil, fmt.Errorf("kubelet: default options: %w", err)
	}
	f, c := &s.KubeletFlags, &s.KubeletConfiguration

	// Identity and API server connection.
	f.HostnameOverride = o.NodeName
	if len(o.NodeIPs) > 0 {
		ips := make([]string, len(o.NodeIPs))
		for i, ip := range o.NodeIPs {
			ips[i] = ip.String()
		}
		f.NodeIP = strings.Join(ips, ",")
	}
	for k, v := range o.NodeLabels {
		f.NodeLabels[k] = v
	}
	c.RegisterWithTaints = o.NodeTaints
	f.KubeConfig = o.Kubeconfig
	f.BootstrapKubeconfig = o.BootstrapKubeconfig
	f.CertDirectory = o.CertDir
	f.RootDirectory = o.RootDir
	// Client certificates rotate through CSRs (a node renews its own).
	// The serving certificate is the server's own node's files, or comes
	// from a kubelet-serving CSR that edgeplane approves only for the
	// node's own names and addresses.
	c.RotateCertificates = true
	if o.ServingCertFile != "" {
		c.TLSCertFile, c.TLSPrivateKeyFile = o.ServingCertFile, o.ServingKeyFile
	} else {
		c.ServerTLSBootstrap = true
	}

	// The kubelet's API: client certificates from ClientCAFile (the API
	// server's), bearer tokens checked by TokenReview, every request
	// authorized by SubjectAccessReview; nothing anonymous, no read-only port.
	c.Authentication.Anonymous.Enabled = false
	c.Authentication.Webhook.Enabled = true
	c.Authentication.X509.ClientCAFile = o.ClientCAFile
	c.Authorization.Mode = kubeletconfig.KubeletAuthorizationModeWebhook
	c.ReadOnlyPort = 0
	c.TLSMinVersion = "VersionTLS12"
	if o.Port != 0 {
		c.Port = o.Port
	}
	c.HealthzBindAddress = "127.0.0.1"
	if o.HealthzPort != 0 {
		c.HealthzPort = o.HealthzPort
	}

	// Runtime and host.
	c.ContainerRuntimeEndpoint = o.RuntimeEndpoint
	c.CgroupDriver = o.CgroupDriver
	if c.CgroupDriver == "" {
		c.CgroupDriver = "cgroupfs"
	}
	if !cgroupV2 {
		// Since v1.35 the kubelet refuses cgroup v1 hosts unless told
		// otherwise. Older boards and these test machines have no v2.
		c.FailCgroupV1 = false
		logger.Info("This host has no unified cgroup (v2) hierarchy: running the kubelet on cgroup v1, which upstream has deprecated; boot with systemd.unified_cgroup_hierarchy=1 to use v2")
	}
	// Edge boards often swap to an SD card or zram (Raspberry Pi OS enables
	// a swap file); k3s does not fail on swap either. Pods get no swap.
	c.FailSwapOn = false

	if o.PodLogsDir != "" {
		c.PodLogsDir = o.PodLogsDir
	}

	// Cluster DNS.
	c.ClusterDomain = o.ClusterDomain
	c.ClusterDNS = ipStrings(o.ClusterDNS)

	// Heartbeat.
	if o.NodeLeaseDuration > 0 {
		c.NodeLeaseDurationSeconds = int32(o.NodeLeaseDuration / time.Second)
	}

	if errs := applyExtraArgs(s, o.ExtraArgs); len(errs) > 0 {
		return nil, utilerrors.NewAggregate(errs)
	}
	return s, nil
}

// ValidateArgs reports every --kubelet-arg value the kubelet would refuse.
func ValidateArgs(extra []string) []error {
	s, err := kubeletoptions.NewKubeletServer()
	if err != nil {
		return []error{err}
	}
	return applyExtraArgs(s, extra)
}

// APIPort is the port of the kubelet's API that the --kubelet-arg values
// extra leave it on, parsed as the kubelet parses them: a port=N among
// them, else DefaultPort. A value the kubelet would refuse counts as not
// given (ValidateArgs reports it).
func APIPort(extra []string) int {
	s, err := kubeletoptions.NewKubeletServer()
	if err != nil {
		return DefaultPort
	}
	s.KubeletConfiguration.Port = DefaultPort
	_ = applyExtraArgs(s, extra)
	if p := int(s.KubeletConfiguration.Port); p > 0 && p < 65536 {
		return p
	}
	return DefaultPort
}

// applyExtraArgs parses --kubelet-arg values with upstream's flag set bound
// to s, so they override what edgeplane set.
func applyExtraArgs(s *kubeletoptions.KubeletServer, extra []string) []error {
	if len(extra) == 0 {
		return nil
	}
	fs := pflag.NewFlagSet("kubelet-arg", pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	s.AddFlags(fs)
	var errs []error
	for _, a := range extra {
		arg, err := splitArg(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if why, ok := unsupportedArgs[name]; ok {
			errs = append(errs, fmt.Errorf("--kubelet-arg %s: %s", name, why))
			continue
		}
		if fs.Lookup(name) == nil {
			errs = append(errs, fmt.Errorf("--kubelet-arg %s: the kubelet has no flag %q", a, name))
			continue
		}
		// One at a time, so that every bad value is reported.
		if err := fs.Parse([]string{arg}); err != nil {
			errs = append(errs, fmt.Errorf("--kubelet-arg %s: %w", a, err))
		}
	}
	return errs
}

// CgroupV2 reports whether the host has the unified cgroup hierarchy.
func CgroupV2() bool { return kubeletutil.IsCgroup2UnifiedMode() }

func ipStrings(ips []net.IP) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}
