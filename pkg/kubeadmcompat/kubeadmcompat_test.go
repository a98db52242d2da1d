package kubeadmcompat

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	kubeadmscheme "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/scheme"
	"k8s.io/kubernetes/cmd/kubeadm/app/componentconfigs"
	"sigs.k8s.io/yaml"
)

func testCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func testConfig(t *testing.T) Config {
	return Config{
		ServerURL: "https://192.0.2.10:6443", CAPEM: testCA(t), KubernetesVersion: "v1.37.2",
		ServiceCIDR: "10.43.0.0/16", PodCIDR: "10.42.0.0/16", ClusterDomain: "cluster.local",
		ClusterDNS: []net.IP{net.ParseIP("10.43.0.10")}, NodeLeaseDuration: 80 * time.Second,
	}
}

func TestKubeadmConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   []string
	}{
		{"good", func(*Config) {}, nil},
		{"no pod CIDR is fine", func(c *Config) { c.PodCIDR = "" }, nil},
		{"every problem at once", func(c *Config) {
			*c = Config{ServerURL: "http://x", CAPEM: []byte("nope"), ServiceCIDR: "10.43.0.0", PodCIDR: "x"}
		}, []string{"want https://HOST:PORT", "not a PEM", "no Kubernetes version", "service CIDR", "pod CIDR", "no cluster domain"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(t)
			tc.mutate(&c)
			errs := c.Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate() = %v, want %d errors", errs, len(tc.want))
			}
			for _, w := range tc.want {
				if all := errors.Join(errs...).Error(); !strings.Contains(all, w) {
					t.Errorf("Validate() = %v, want one with %q", errs, w)
				}
			}
		})
	}
}

// TestKubeadmConfigMapsDecode decodes the ConfigMaps with kubeadm's own
// scheme and checks, as `kubeadm join` does.
func TestKubeadmConfigMapsDecode(t *testing.T) {
	c := testConfig(t)
	t.Run("cluster-info", func(t *testing.T) {
		cm, err := clusterInfoConfigMap(c)
		if err != nil {
			t.Fatal(err)
		}
		kc, err := clientcmd.Load([]byte(cm.Data[bootstrapapi.KubeConfigKey]))
		if err != nil {
			t.Fatal(err)
		}
		cl := kc.Clusters[""]
		if len(kc.Clusters) != 1 || cl == nil || cl.Server != c.ServerURL || string(cl.CertificateAuthorityData) != string(c.CAPEM) {
			t.Fatalf("cluster-info kubeconfig = %+v, want one unnamed cluster with the server and the CA file's bytes", kc.Clusters)
		}
	})
	t.Run("kubeadm-config", func(t *testing.T) {
		cm, err := kubeadmConfigMap(c)
		if err != nil {
			t.Fatal(err)
		}
		var cc kubeadmapi.ClusterConfiguration
		if err := runtime.DecodeInto(kubeadmscheme.Codecs.UniversalDecoder(), []byte(cm.Data[clusterConfigKey]), &cc); err != nil {
			t.Fatalf("kubeadm cannot decode the ClusterConfiguration: %v\n%s", err, cm.Data[clusterConfigKey])
		}
		if cc.KubernetesVersion != c.KubernetesVersion || cc.ControlPlaneEndpoint != "192.0.2.10:6443" ||
			cc.Networking.ServiceSubnet != c.ServiceCIDR || cc.Networking.PodSubnet != c.PodCIDR || cc.Networking.DNSDomain != c.ClusterDomain {
			t.Errorf("decoded ClusterConfiguration = %+v", cc)
		}
	})
	t.Run("kubelet-config", func(t *testing.T) {
		cm, err := kubeletConfigMap(c)
		if err != nil {
			t.Fatal(err)
		}
		if !componentconfigs.VerifyConfigMapSignature(cm) {
			t.Errorf("kubeadm does not recognize the checksum %q as its own", cm.Annotations[componentConfigHash])
		}
		var kc kubeletv1beta1.KubeletConfiguration
		if err := yaml.UnmarshalStrict([]byte(cm.Data[kubeletConfigKey]), &kc); err != nil {
			t.Fatal(err)
		}
		if kc.Kind != "KubeletConfiguration" || kc.ClusterDomain != c.ClusterDomain || len(kc.ClusterDNS) != 1 || kc.ClusterDNS[0] != "10.43.0.10" ||
			*kc.Authentication.Anonymous.Enabled || !*kc.Authentication.Webhook.Enabled || kc.Authorization.Mode != kubeletv1beta1.KubeletAuthorizationModeWebhook ||
			kc.NodeLeaseDurationSeconds != 80 {
			t.Errorf("decoded KubeletConfiguration = %+v", kc)
		}
	})
}

// TestKubeadmRBACNames checks the roles open exactly one ConfigMap each and
// that only cluster-info is bound to anonymous.
func TestKubeadmRBACNames(t *testing.T) {
	for _, r := range roles() {
		if len(r.Rules) != 1 || len(r.Rules[0].ResourceNames) != 1 || len(r.Rules[0].Verbs) != 1 || r.Rules[0].Verbs[0] != "get" {
			t.Errorf("Role %s/%s rules %+v: want get of one object", r.Namespace, r.Name, r.Rules)
		}
		b := roleBinding(r)
		anon := false
		for _, s := range b.Subjects {
			anon = anon || s.Name == "system:anonymous" || s.Name == "system:unauthenticated"
		}
		if want := r.Name == ClusterInfoRole; anon != want {
			t.Errorf("RoleBinding %s: anonymous = %v, want %v", r.Name, anon, want)
		}
	}
}
