package controllers

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	cmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

// testPKI returns PKI paths under dir; only the kubeconfigs exist, pointing at
// an address nothing listens on (building configs never dials).
func testPKI(t *testing.T) *certs.PKI {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := `apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: test
contexts:
- name: local
  context: {cluster: local, user: u}
current-context: local
`
	p := &certs.PKI{
		Dir:                         dir,
		ServerCA:                    certs.KeyPair{Cert: filepath.Join(dir, "server-ca.crt"), Key: filepath.Join(dir, "server-ca.key")},
		KubeletServingCA:            certs.KeyPair{Cert: filepath.Join(dir, "kubelet-serving-ca.crt"), Key: filepath.Join(dir, "kubelet-serving-ca.key")},
		ClientCA:                    certs.KeyPair{Cert: filepath.Join(dir, "client-ca.crt"), Key: filepath.Join(dir, "client-ca.key")},
		ServiceAccountKey:           filepath.Join(dir, "sa.key"),
		AdminKubeconfig:             filepath.Join(dir, "admin.kubeconfig"),
		ControllerManagerKubeconfig: filepath.Join(dir, "controller-manager.kubeconfig"),
		SchedulerKubeconfig:         filepath.Join(dir, "scheduler.kubeconfig"),
	}
	for _, f := range []string{p.AdminKubeconfig, p.ControllerManagerKubeconfig, p.SchedulerKubeconfig} {
		if err := os.WriteFile(f, []byte(kubeconfig), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func cidr(t *testing.T, s string) *net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestValidate(t *testing.T) {
	pki := testPKI(t)
	noSA := *pki
	noSA.ServiceAccountKey = ""
	noKubeletCA := *pki
	noKubeletCA.KubeletServingCA.Key = ""
	cases := []struct {
		name string
		opts Options
		want []string // substrings, one per expected error
	}{
		{name: "defaults", opts: Options{PKI: pki}},
		{name: "no PKI", opts: Options{}, want: []string{"no PKI"}},
		{name: "missing path", opts: Options{PKI: &noSA}, want: []string{"service-account key"}},
		{name: "no kubelet-serving CA", opts: Options{PKI: &noKubeletCA}, want: []string{"kubelet-serving CA key"}},
		{name: "service CIDR apart", opts: Options{PKI: pki, ServiceCIDR: cidr(t, "10.43.0.0/16"), AllocateNodeCIDRs: true}},
		{name: "dual stack", opts: Options{PKI: pki, ClusterCIDR: "10.42.0.0/16, fd00:42::/56", AllocateNodeCIDRs: true}},
		{name: "not a CIDR", opts: Options{PKI: pki, ClusterCIDR: "10.42.0.0"}, want: []string{"--cluster-cidr"}},
		{name: "three CIDRs", opts: Options{PKI: pki, ClusterCIDR: "10.42.0.0/16,10.44.0.0/16,fd00::/56"}, want: []string{"one IPv4 and one IPv6"}},
		{name: "two IPv4", opts: Options{PKI: pki, ClusterCIDR: "10.42.0.0/16,10.44.0.0/16"}, want: []string{"one IPv4 and one IPv6"}},
		{name: "loopback", opts: Options{PKI: pki, ClusterCIDR: "127.0.0.0/8"}, want: []string{"not a usable pod network"}},
		{name: "overlaps services", opts: Options{PKI: pki, ServiceCIDR: cidr(t, "10.42.128.0/20")}, want: []string{"overlaps --service-cidr"}},
		{name: "smaller than a node", opts: Options{PKI: pki, ClusterCIDR: "10.42.0.0/25", AllocateNodeCIDRs: true}, want: []string{"smaller than one node"}},
		{name: "small without allocation", opts: Options{PKI: pki, ClusterCIDR: "10.42.0.0/25"}},
		{name: "too large for nodes", opts: Options{PKI: pki, ClusterCIDR: "10.0.0.0/7", AllocateNodeCIDRs: true}, want: []string{"too large"}},
		{name: "IPv6 too large", opts: Options{PKI: pki, ClusterCIDR: "fd00::/40", AllocateNodeCIDRs: true}, want: []string{"too large"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.opts.Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate() = %v, want %d errors like %q", errs, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to mention %q", i, errs[i], w)
				}
			}
			_, cmErr := NewControllerManager(tc.opts)
			_, schedErr := NewScheduler(tc.opts)
			if (cmErr == nil) != (len(tc.want) == 0) || (schedErr == nil) != (len(tc.want) == 0) {
				t.Errorf("constructors: %v / %v, want an error: %v", cmErr, schedErr, len(tc.want) > 0)
			}
		})
	}
}

func TestControllerManagerOptions(t *testing.T) {
	pki := testPKI(t)
	cases := []struct {
		name  string
		opts  Options
		check func(t *testing.T, s *cmoptions.KubeControllerManagerOptions)
	}{
		{
			name: "defaults",
			opts: Options{PKI: pki},
			check: func(t *testing.T, s *cmoptions.KubeControllerManagerOptions) {
				eq(t, "cluster CIDR", s.KubeCloudShared.ClusterCIDR, DefaultClusterCIDR)
				eq(t, "allocate node CIDRs", s.KubeCloudShared.AllocateNodeCIDRs, false)
				eq(t, "node IPAM service CIDR", s.NodeIPAMController.ServiceCIDR, "")
				// The kube-controller-manager command's flag defaults: with
				// an eviction rate of 0 a dead node's pods are never evicted.
				eq(t, "node eviction rate", s.NodeLifecycleController.NodeEvictionRate, float32(0.1))
				eq(t, "secondary node eviction rate", s.NodeLifecycleController.SecondaryNodeEvictionRate, float32(0.01))
				eq(t, "large cluster size threshold", s.NodeLifecycleController.LargeClusterSizeThreshold, int32(50))
				eq(t, "unhealthy zone threshold", s.NodeLifecycleController.UnhealthyZoneThreshold, float32(0.55))
				eq(t, "node monitor grace period", s.NodeLifecycleController.NodeMonitorGracePeriod.Duration, 50*time.Second)
				// Upstream's default, one year: the kubelet-serving
				// transition (pkg/certs) lasts as long.
				eq(t, "signing duration", s.CSRSigningController.ClusterSigningDuration.Duration, 365*24*time.Hour)
			},
		},
		{
			name: "test lifetimes",
			opts: Options{PKI: pki, LeafValidity: 90 * time.Second},
			check: func(t *testing.T, s *cmoptions.KubeControllerManagerOptions) {
				eq(t, "signing duration", s.CSRSigningController.ClusterSigningDuration.Duration, 90*time.Second)
			},
		},
		{
			name: "node heartbeat",
			opts: Options{PKI: pki, NodeMonitorGracePeriod: 150 * time.Second},
			check: func(t *testing.T, s *cmoptions.KubeControllerManagerOptions) {
				eq(t, "node monitor grace period", s.NodeLifecycleController.NodeMonitorGracePeriod.Duration, 150*time.Second)
			},
		},
		{
			name: "node IPAM",
			opts: Options{PKI: pki, ClusterCIDR: "10.99.0.0/16", AllocateNodeCIDRs: true, ServiceCIDR: cidr(t, "10.100.0.0/16")},
			check: func(t *testing.T, s *cmoptions.KubeControllerManagerOptions) {
				eq(t, "cluster CIDR", s.KubeCloudShared.ClusterCIDR, "10.99.0.0/16")
				eq(t, "allocate node CIDRs", s.KubeCloudShared.AllocateNodeCIDRs, true)
				eq(t, "node IPAM service CIDR", s.NodeIPAMController.ServiceCIDR, "10.100.0.0/16")
				// Empty, node IPAM refuses to start ("invalid CIDR allocator type").
				eq(t, "CIDR allocator", s.KubeCloudShared.CIDRAllocatorType, "RangeAllocator")
			},
		},
		{
			name: "dual stack, canonical",
			opts: Options{PKI: pki, ClusterCIDR: " 10.42.0.1/16 , fd00:42::/56", AllocateNodeCIDRs: true},
			check: func(t *testing.T, s *cmoptions.KubeControllerManagerOptions) {
				eq(t, "cluster CIDR", s.KubeCloudShared.ClusterCIDR, "10.42.0.0/16,fd00:42::/56")
			},
		},
		{
			name: "leader election stays upstream-off",
			opts: Options{PKI: pki, LeaderElect: true},
			check: func(t *testing.T, s *cmoptions.KubeControllerManagerOptions) {
				eq(t, "upstream leader election", s.Generic.LeaderElection.LeaderElect, false)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := controllerManagerOptions(&tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			// Common to every case.
			eq(t, "kubeconfig", s.Generic.ClientConnection.Kubeconfig, pki.ControllerManagerKubeconfig)
			eq(t, "service-account credentials", s.KubeCloudShared.UseServiceAccountCredentials, true)
			eq(t, "QPS", s.Generic.ClientConnection.QPS, clientQPS)
			eq(t, "burst", s.Generic.ClientConnection.Burst, clientBurst)
			eq(t, "secure port", s.SecureServing.BindPort, 0)
			eq(t, "metrics options", s.Metrics == nil, true)
			eq(t, "leader election", s.Generic.LeaderElection.LeaderElect, false)
			eq(t, "kubelet-client signer", s.CSRSigningController.KubeletClientSignerConfiguration.CertFile, pki.ClientCA.Cert)
			eq(t, "kubelet-client signer key", s.CSRSigningController.KubeletClientSignerConfiguration.KeyFile, pki.ClientCA.Key)
			eq(t, "kube-apiserver-client signer", s.CSRSigningController.KubeAPIServerClientSignerConfiguration.CertFile, pki.ClientCA.Cert)
			// Its own CA, never the server CA that clients trust for the API server.
			eq(t, "kubelet-serving signer", s.CSRSigningController.KubeletServingSignerConfiguration.CertFile, pki.KubeletServingCA.Cert)
			eq(t, "kubelet-serving signer key", s.CSRSigningController.KubeletServingSignerConfiguration.KeyFile, pki.KubeletServingCA.Key)
			eq(t, "signing duration", s.CSRSigningController.ClusterSigningDuration.Duration, certs.SigningDuration(tc.opts.LeafValidity))
			eq(t, "legacy-unknown signer", s.CSRSigningController.LegacyUnknownSignerConfiguration.CertFile, "")
			eq(t, "SA key", s.SAController.ServiceAccountKeyFile, pki.ServiceAccountKey)
			eq(t, "root CA", s.SAController.RootCAFile, pki.ServerCA.Cert)
			tc.check(t, s)

			// Upstream accepts them and builds a config without serving.
			c, err := s.Config(context.Background(), cmapp.KnownControllers(), cmapp.ControllersDisabledByDefault(), cmapp.ControllerAliases())
			if err != nil {
				t.Fatalf("upstream Config: %v", err)
			}
			if c.SecureServing != nil {
				t.Errorf("secure serving is on: %+v", c.SecureServing)
			}
			if c.Kubeconfig.Host != "https://127.0.0.1:1" {
				t.Errorf("kubeconfig host = %q", c.Kubeconfig.Host)
			}
			for _, want := range []string{"*", names.TokenCleanerController,
				"-" + names.RootCACertificatePublisherController, "-" + names.BootstrapSignerController} {
				if !slices.Contains(c.ComponentConfig.Generic.Controllers, want) {
					t.Errorf("controllers %v lack %q", c.ComponentConfig.Generic.Controllers, want)
				}
			}
			c.EventBroadcaster.Shutdown()
		})
	}
}

// TestExtraControllersAreOffByDefault guards the reason for extraControllers.
func TestExtraControllersAreOffByDefault(t *testing.T) {
	off := cmapp.ControllersDisabledByDefault()
	for _, c := range extraControllers {
		if !slices.Contains(off, c) {
			t.Errorf("%s is on by default now; drop it from extraControllers", c)
		}
	}
}

func TestSchedulerOptions(t *testing.T) {
	pki := testPKI(t)
	for _, le := range []bool{false, true} {
		opts, err := schedulerOptions(&Options{PKI: pki, LeaderElect: le})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		// Setup is what the component calls; it builds clients but dials nothing.
		cc, _, err := schedapp.Setup(ctx, opts)
		if err != nil {
			cancel()
			t.Fatalf("upstream Setup: %v", err)
		}
		eq(t, "kubeconfig", cc.ComponentConfig.ClientConnection.Kubeconfig, pki.SchedulerKubeconfig)
		eq(t, "leader election", cc.ComponentConfig.LeaderElection.LeaderElect, false)
		if cc.LeaderElection != nil {
			t.Error("upstream leader election is configured")
		}
		if cc.SecureServing != nil {
			t.Errorf("secure serving is on: %+v", cc.SecureServing)
		}
		if cc.KubeConfig.Host != "https://127.0.0.1:1" {
			t.Errorf("kubeconfig host = %q", cc.KubeConfig.Host)
		}
		cancel()
		cc.EventBroadcaster.Shutdown()
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// TestNodeLifecycleFlagDefaultsDebt fails once upstream's options struct
// carries the node lifecycle defaults that only its flags set today
// (k8s.io/kubernetes v1.37.2): then nodeLifecycleFlagDefaults can go.
func TestNodeLifecycleFlagDefaultsDebt(t *testing.T) {
	s, err := cmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.NodeLifecycleController.NodeEvictionRate; got != 0 {
		t.Errorf("upstream's options now default NodeEvictionRate to %v: remove nodeLifecycleFlagDefaults", got)
	}
}
