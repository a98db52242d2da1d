package kubelet

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
)

func validOptions() Options {
	return Options{
		NodeName: "edge-1", RootDir: "/var/lib/edgeplane/agent/kubelet", CertDir: "/var/lib/edgeplane/agent/kubelet/pki",
		Kubeconfig: "/var/lib/edgeplane/agent/kubelet.kubeconfig", ClientCAFile: "/var/lib/edgeplane/agent/client-ca.crt",
		RuntimeEndpoint: "unix:///run/containerd/containerd.sock", ClusterDomain: "cluster.local",
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want []string
	}{
		{name: "valid"},
		{name: "bad node name", edit: func(o *Options) { o.NodeName = "Edge_1" }, want: []string{`--node-name "Edge_1"`}},
		{name: "three node IPs", edit: func(o *Options) {
			o.NodeIPs = []net.IP{net.ParseIP("192.0.2.1"), net.ParseIP("192.0.2.2"), net.ParseIP("::1")}
		}, want: []string{"at most one IPv4 and one IPv6"}},
		{name: "two IPv4", edit: func(o *Options) { o.NodeIPs = []net.IP{net.ParseIP("192.0.2.1"), net.ParseIP("192.0.2.2")} },
			want: []string{"one IPv4 and one IPv6"}},
		{name: "unspecified node IP", edit: func(o *Options) { o.NodeIPs = []net.IP{net.IPv4zero} }, want: []string{"not a usable node address"}},
		{name: "relative root dir and no runtime", edit: func(o *Options) { o.RootDir = "kubelet"; o.RuntimeEndpoint = "" },
			want: []string{`root dir "kubelet" is not an absolute path`, "no container runtime endpoint"}},
		{name: "cgroup driver", edit: func(o *Options) { o.CgroupDriver = "cgroupv2" }, want: []string{`cgroup driver "cgroupv2"`}},
		{name: "empty kubelet arg", edit: func(o *Options) { o.ExtraArgs = []string{"=x"} }, want: []string{"want name=value"}},
		{name: "feature gates on an agent", edit: func(o *Options) { o.ExtraArgs = []string{"feature-gates=KubeletTracing=false"} }},
		{name: "feature gates in a server's process", edit: func(o *Options) {
			o.InServer = true
			o.ExtraArgs = []string{"feature-gates=KubeletTracing=false"}
		}, want: []string{"in the API server's process, whose feature gates it would change too"}},
		{name: "serving certificate without its key", edit: func(o *Options) { o.ServingCertFile = "/d/kubelet.crt" }, want: []string{"both its certificate and its key"}},
		{name: "root dir at the socket limit", edit: func(o *Options) { o.RootDir = "/" + strings.Repeat("r", maxUnixPath-len(longestSocket)-1) }},
		{name: "root dir over the socket limit", edit: func(o *Options) { o.RootDir = "/" + strings.Repeat("r", maxUnixPath-len(longestSocket)) },
			want: []string{"use a data dir at most 1 bytes shorter"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions()
			if tc.edit != nil {
				tc.edit(&o)
			}
			errs := o.Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate() = %v, want %d errors", errs, len(tc.want))
			}
			for i, want := range tc.want {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i], want)
				}
			}
		})
	}
}

func TestParseTaintAndLabel(t *testing.T) {
	for _, tc := range []struct {
		in, wantErr string
	}{
		{in: "dedicated=edge:NoSchedule"},
		{in: "gpu:NoExecute"},
		{in: "dedicated=edge", wantErr: "want key=value:Effect"},
		{in: "dedicated=edge:Sometimes", wantErr: `effect "Sometimes"`},
		{in: "bad key!=x:NoSchedule", wantErr: "key:"},
	} {
		_, err := ParseTaint(tc.in)
		if got := errString(err); !strings.Contains(got, tc.wantErr) || (tc.wantErr == "") != (err == nil) {
			t.Errorf("ParseTaint(%q) error = %q, want %q", tc.in, got, tc.wantErr)
		}
	}
	for _, tc := range []struct {
		in, wantErr string
	}{
		{in: "edge.example/zone=a"},
		{in: "zone", wantErr: "want key=value"},
		{in: "zone=not valid", wantErr: "value:"},
	} {
		_, _, err := ParseLabel(tc.in)
		if got := errString(err); !strings.Contains(got, tc.wantErr) || (tc.wantErr == "") != (err == nil) {
			t.Errorf("ParseLabel(%q) error = %q, want %q", tc.in, got, tc.wantErr)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestServerSettings checks what edgeplane sets in the upstream kubelet's
// options, and that --kubelet-arg overrides it through upstream's flags.
func TestServerSettings(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	o := validOptions()
	o.NodeIPs = []net.IP{net.ParseIP("192.0.2.7")}
	o.NodeLabels = map[string]string{"edge.example/zone": "a"}
	o.ClusterDNS = []net.IP{net.ParseIP("10.43.0.10")}
	o.NodeLeaseDuration = 2 * time.Minute
	o.ExtraArgs = []string{"max-pods=50", "--node-status-update-frequency=20s"}
	s, err := o.server(logger, false)
	if err != nil {
		t.Fatal(err)
	}
	c := s.KubeletConfiguration
	for _, check := range []struct {
		what      string
		got, want any
	}{
		{"hostname override", s.HostnameOverride, "edge-1"},
		{"node IP", s.NodeIP, "192.0.2.7"},
		{"node label", s.NodeLabels["edge.example/zone"], "a"},
		{"rotate certificates", c.RotateCertificates, true},
		{"serving certificate by CSR", c.ServerTLSBootstrap, true},
		{"anonymous auth", c.Authentication.Anonymous.Enabled, false},
		{"webhook authn", c.Authentication.Webhook.Enabled, true},
		{"client CA", c.Authentication.X509.ClientCAFile, o.ClientCAFile},
		{"authz mode", c.Authorization.Mode, kubeletconfig.KubeletAuthorizationModeWebhook},
		{"read-only port", c.ReadOnlyPort, int32(0)},
		{"TLS min", c.TLSMinVersion, "VersionTLS12"},
		{"healthz bind", c.HealthzBindAddress, "127.0.0.1"},
		{"cgroup driver", c.CgroupDriver, "cgroupfs"},
		{"fail on cgroup v1", c.FailCgroupV1, false},
		{"fail on swap", c.FailSwapOn, false},
		{"cluster DNS", strings.Join(c.ClusterDNS, ","), "10.43.0.10"},
		{"node lease duration", c.NodeLeaseDurationSeconds, int32(120)},
		{"max pods from --kubelet-arg", c.MaxPods, int32(50)},
		{"status frequency from --kubelet-arg", c.NodeStatusUpdateFrequency.Duration.String(), "20s"},
	} {
		if check.got != check.want {
			t.Errorf("%s = %v, want %v", check.what, check.got, check.want)
		}
	}
}

// TestServingCertFiles: a serving certificate the server minted is used
// as files (the kubelet reloads them), with no serving CSR.
func TestServingCertFiles(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	o := validOptions()
	o.ServingCertFile, o.ServingKeyFile = "/d/kubelet-serving.crt", "/d/kubelet-serving.key"
	o.CgroupDriver = "systemd"
	s, err := o.server(logger, true)
	if err != nil {
		t.Fatal(err)
	}
	c := s.KubeletConfiguration
	if c.ServerTLSBootstrap || c.TLSCertFile != o.ServingCertFile || c.TLSPrivateKeyFile != o.ServingKeyFile {
		t.Errorf("serving: bootstrap %v, files %q %q; want the given files and no CSR", c.ServerTLSBootstrap, c.TLSCertFile, c.TLSPrivateKeyFile)
	}
	if c.CgroupDriver != "systemd" {
		t.Errorf("cgroup driver %q, want the runtime's systemd", c.CgroupDriver)
	}
}

func TestValidateArgs(t *testing.T) {
	errs := ValidateArgs([]string{"max-pods=50", "no-such-flag=1", "config=/etc/kubelet.yaml", "max-pods=lots"})
	want := []string{`the kubelet has no flag "no-such-flag"`, "config: a kubelet config file", "max-pods=lots"}
	if len(errs) != len(want) {
		t.Fatalf("ValidateArgs = %v, want %d errors", errs, len(want))
	}
	for i, w := range want {
		if !strings.Contains(errs[i].Error(), w) {
			t.Errorf("error %d = %q, want %q", i, errs[i], w)
		}
	}
}

// TestRootDirSocketLimit binds the kubelet's longest socket below root dirs
// one byte either side of what ValidateRootDir allows: the kernel must agree
// with it.
func TestRootDirSocketLimit(t *testing.T) {
	base := t.TempDir()
	for _, extra := range []int{0, 1} {
		n := maxUnixPath - len(longestSocket) + extra
		pad := n - len(base) - 1
		if pad < 1 {
			t.Skipf("temp dir %s is too long for this test", base)
		}
		root := filepath.Join(base, strings.Repeat("d", pad))
		sock := root + longestSocket
		if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
			t.Fatal(err)
		}
		verr := ValidateRootDir(root, "--data-dir")
		l, lerr := net.Listen("unix", sock)
		if lerr == nil {
			l.Close()
		}
		if (verr == nil) != (lerr == nil) {
			t.Errorf("root dir of %d bytes: ValidateRootDir says %v, binding %s says %v", len(root), verr, sock, lerr)
		}
	}
}
