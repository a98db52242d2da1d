package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestNodeServingCertificate: a server that is its own node mints its
// kubelet's serving certificate from the kubelet-serving CA (its addresses
// are the API server's, which no CSR may name): the kubelet serves it, it
// names only the node's addresses, the InternalIP among them, and the API
// server verifies it. A request in the node's name for an address that is
// not its own is denied.
func TestNodeServingCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containerd, a server and its kubelet")
	}
	parallelNode(t)
	// Its own kubelet ports: other tests' kubelets may hold the defaults.
	s, _, _ := nodeServer(t, "--kubelet-arg=port="+freePort(t), "--kubelet-arg=healthz-port="+freePort(t))
	ctx := context.Background()
	node, err := s.client.CoreV1().Nodes().Get(ctx, "edge-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]bool{}
	internal := ""
	for _, a := range node.Status.Addresses {
		own[a.Address] = true
		if a.Type == corev1.NodeInternalIP {
			internal = a.Address
		}
	}
	kubeletCA := readCertFile(t, filepath.Join(s.dataDir, "tls", "kubelet-serving-ca.crt"))
	roots := x509.NewCertPool()
	roots.AddCert(kubeletCA)

	// The kubelet serves it (asked on loopback; the kubelet listens on
	// every address).
	port := int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)
	if port == 0 {
		port = 10250
	}
	var served *x509.Certificate
	eventually(t, time.Minute, "the kubelet serving its certificate", func(ctx context.Context) (bool, error) {
		conn, err := (&tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}).DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return false, err
		}
		defer conn.Close()
		served = conn.(*tls.Conn).ConnectionState().PeerCertificates[0]
		return true, nil
	})
	if _, err := served.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the served certificate does not verify against the kubelet-serving CA: %v", err)
	}
	for _, name := range served.DNSNames {
		if !own[name] {
			t.Errorf("the served certificate names %q, not an address of edge-1 (%v)", name, node.Status.Addresses)
		}
	}
	for _, ip := range served.IPAddresses {
		if !own[ip.String()] {
			t.Errorf("the served certificate names %s, not an address of edge-1 (%v)", ip, node.Status.Addresses)
		}
	}
	if !slicesContainsIP(served.IPAddresses, internal) {
		t.Errorf("the served certificate's IPs %v lack the InternalIP %s the API server dials", served.IPAddresses, internal)
	}
	list, err := s.client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.signerName", certificatesv1.KubeletServingSignerName).String()})
	if err != nil {
		t.Fatal(err)
	}
	for _, csr := range list.Items {
		if csr.Spec.Username == "system:node:edge-1" {
			t.Errorf("the server's own kubelet asked for a serving certificate (%s): it has one minted", csr.Name)
		}
	}
	// The API server dials the kubelet and verifies it.
	if out, err := s.kubectl("get", "--raw", "/api/v1/nodes/edge-1/proxy/healthz"); err != nil || out != "ok" {
		t.Errorf("the API server through the kubelet's serving certificate: %q, %v", out, err)
	}

	// A request in edge-1's name for an address that is not its own.
	cfg := rest.CopyConfig(s.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:edge-1", Groups: []string{"system:nodes"}}
	asNode := kubernetes.NewForConfigOrDie(cfg)
	forged := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "forged-serving"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    servingRequest(t, "system:node:edge-1", net.ParseIP("10.255.0.1")),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}
	if _, err := asNode.CertificatesV1().CertificateSigningRequests().Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var cond certificatesv1.CertificateSigningRequestCondition
	eventually(t, time.Minute, "the forged request decided", func(ctx context.Context) (bool, error) {
		csr, err := s.client.CertificatesV1().CertificateSigningRequests().Get(ctx, forged.Name, metav1.GetOptions{})
		if err != nil || len(csr.Status.Conditions) == 0 {
			return false, err
		}
		cond = csr.Status.Conditions[0]
		return true, nil
	})
	if cond.Type != certificatesv1.CertificateDenied || cond.Status != corev1.ConditionTrue || cond.Reason != "SANNotOfNode" {
		t.Errorf("forged request: %s %s (%s), want Denied SANNotOfNode", cond.Type, cond.Reason, cond.Message)
	}
	t.Logf("forged request: %s %s: %s", cond.Type, cond.Reason, cond.Message)
}

// servingRequest is a PEM x509 request for a node's serving certificate.
func servingRequest(t *testing.T, cn string, ips ...net.IP) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}},
		IPAddresses: ips,
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func readCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
