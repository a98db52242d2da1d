package chain

import (
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	"k8s.io/kubernetes/pkg/capabilities"
)

// Authorization modes and admission plugins edgeplane always runs with.
var (
	authorizationModes = []string{"Node", "RBAC"}
	extraAdmission     = []string{"NodeRestriction"}
)

// KubeletAddressTypes are the Node address types the API server dials a
// kubelet at, in order (--kubelet-preferred-address-types). Addresses come
// first: node names need not resolve (an edge LAN rarely has DNS for its
// boards), and the kubelet's serving certificate holds its addresses.
var KubeletAddressTypes = []corev1.NodeAddressType{
	corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS,
}

// buildOptions fills upstream kube-apiserver options as Go structs, the same
// fields the kube-apiserver flags would set.
func buildOptions(c *Config, authnConfigFile string) (*options.ServerRunOptions, error) {
	tcp, ok := c.Listener.Addr().(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("chain: listener %s is not TCP", c.Listener.Addr())
	}
	s := options.NewServerRunOptions()

	// Serving: our listener, our PKI, TLS 1.2 or newer.
	s.SecureServing.Listener = c.Listener
	s.SecureServing.BindAddress = tcp.IP
	s.SecureServing.BindPort = tcp.Port
	s.SecureServing.ServerCert.CertKey.CertFile = c.Files.ServingCert
	s.SecureServing.ServerCert.CertKey.KeyFile = c.Files.ServingKey
	s.SecureServing.MinTLSVersion = "VersionTLS12"
	s.GenericServerRunOptions.AdvertiseAddress = c.AdvertiseAddress
	s.GenericServerRunOptions.ShutdownWatchTerminationGracePeriod = c.ShutdownWatchGrace
	s.Features.EnableProfiling = false
	s.Features.EnableContentionProfiling = false

	// Storage: etcd3 protocol to the datastore (kine on a unix socket, or etcd over TLS).
	s.Etcd.StorageConfig.Transport.ServerList = c.Storage.Endpoints
	// Compaction is the quiet compactor's (compaction.go), not upstream's.
	s.Etcd.StorageConfig.CompactionInterval = 0
	s.Etcd.StorageConfig.Transport.TrustedCAFile = c.Storage.CAFile
	s.Etcd.StorageConfig.Transport.CertFile = c.Storage.CertFile
	s.Etcd.StorageConfig.Transport.KeyFile = c.Storage.KeyFile

	// Authentication: client certs, front-proxy request headers, service-account
	// tokens, bootstrap tokens; anonymous only on the health endpoints.
	s.Authentication.ClientCert.ClientCA = c.Files.ClientCA
	s.Authentication.RequestHeader.ClientCAFile = c.Files.FrontProxyCA
	s.Authentication.RequestHeader.AllowedNames = []string{"front-proxy-client"}
	s.Authentication.RequestHeader.UsernameHeaders = []string{"X-Remote-User"}
	s.Authentication.RequestHeader.UIDHeaders = []string{"X-Remote-Uid"}
	s.Authentication.RequestHeader.GroupHeaders = []string{"X-Remote-Group"}
	s.Authentication.RequestHeader.ExtraHeaderPrefixes = []string{"X-Remote-Extra-"}
	s.ProxyClientCertFile = c.Files.FrontProxyClientCert
	s.ProxyClientKeyFile = c.Files.FrontProxyClientKey
	s.Authentication.BootstrapToken.Enable = true
	s.Authentication.AuthenticationConfigFile = authnConfigFile
	s.Authentication.Anonymous.Allow = false
	issuer := "https://kubernetes.default.svc." + c.ClusterDomain
	s.Authentication.ServiceAccounts.Issuers = []string{issuer}
	s.Authentication.ServiceAccounts.KeyFiles = []string{c.Files.ServiceAccountPub}
	s.ServiceAccountSigningKeyFile = c.Files.ServiceAccountKey

	// Authorization and admission.
	s.Authorization.Modes = authorizationModes
	s.Admission.GenericAdmission.EnablePlugins = extraAdmission
	s.AllowPrivileged = c.AllowPrivileged

	// Services and the kubelet connection.
	s.ServiceClusterIPRanges = c.ServiceCIDR.String()
	s.KubeletConfig.TLSClientConfig.CertFile = c.Files.KubeletClientCert
	s.KubeletConfig.TLSClientConfig.KeyFile = c.Files.KubeletClientKey
	s.KubeletConfig.TLSClientConfig.CAFile = c.Files.KubeletCA
	s.KubeletConfig.PreferredAddressTypes = make([]string, 0, len(KubeletAddressTypes))
	for _, t := range KubeletAddressTypes {
		s.KubeletConfig.PreferredAddressTypes = append(s.KubeletConfig.PreferredAddressTypes, string(t))
	}
	reconciler, count := endpointReconciler(c.SharedDatastore, c.NoServiceEndpoint)
	s.EndpointReconcilerType, s.MasterCount = string(reconciler), count
	applyDay2(s, c.Day2)
	applyTuningOptions(s, c.Tuning)
	return s, nil
}

// checkAllowPrivileged checks, once upstream has built the API server's
// configuration, that the process-wide setting it validates pods with is
// allow. Upstream sets it with the first call only (capabilities.Setup in
// CreateKubeAPIServerConfig), so something that set it before would
// silently win.
func checkAllowPrivileged(allow bool) error {
	if got := capabilities.Get().AllowPrivileged; got != allow {
		return fmt.Errorf("chain: privileged containers are to be %s, but this process has them %s already (set before the API server was built)",
			allowed(allow), allowed(got))
	}
	return nil
}

func allowed(allow bool) string {
	if allow {
		return "allowed"
	}
	return "refused"
}
