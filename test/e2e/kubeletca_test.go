package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

// TestKubeletServingTrust: kubelet serving certificates (the server's own
// node's, minted by the server, and a real agent's, issued on its CSR)
// come from the kubelet-serving CA, which nothing a
// client or pod trusts holds: a client that trusts kube-root-ca.crt refuses
// them, so a node can no longer pose as the API server. The kubelet API of
// both nodes refuses anonymous requests (401) and users without nodes/proxy
// rights (403), and the read-only port is closed.
func TestKubeletServingTrust(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containerd, a server, its kubelet and an agent")
	}
	parallelNode(t, buildClusterImages(t))
	c := startTwoNodeCluster(t, twoNodeOptions{})
	s := c.Server
	agentDir := flagValue(t, c.agentArgs, "--data-dir")

	ctx := context.Background()
	kubeletCAPEM := readFile(t, filepath.Join(s.dataDir, "tls", "kubelet-serving-ca.crt"))
	kubeletCA := parseCert(t, kubeletCAPEM)
	serverCA := parseCert(t, readFile(t, filepath.Join(s.dataDir, "tls", "server-ca.crt")))

	// What clients and pods trust for the API server.
	rootCM, err := s.client.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clusterInfo, err := s.client.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ci, err := clientcmd.Load([]byte(clusterInfo.Data["kubeconfig"]))
	if err != nil {
		t.Fatal(err)
	}
	trusted := map[string][]byte{
		"kube-root-ca.crt": []byte(rootCM.Data["ca.crt"]),
		"admin kubeconfig": s.config.CAData,
		"node kubeconfig":  kubeconfigCA(t, filepath.Join(s.dataDir, "agent", "kubelet.kubeconfig")),
		"agent kubeconfig": kubeconfigCA(t, filepath.Join(agentDir, "agent", "kubelet.kubeconfig")),
		"cluster-info":     nil,
	}
	for _, c := range ci.Clusters {
		trusted["cluster-info"] = c.CertificateAuthorityData
	}
	t.Run("no client trusts the kubelet-serving CA", func(t *testing.T) {
		for name, caPEM := range trusted {
			cas := pemCerts(t, caPEM)
			if len(cas) == 0 {
				t.Errorf("%s holds no CA", name)
			}
			for _, c := range cas {
				if c.Equal(kubeletCA) {
					t.Errorf("%s holds the kubelet-serving CA", name)
				}
				if !c.Equal(serverCA) {
					t.Errorf("%s holds %s, not the server CA", name, c.Subject)
				}
			}
		}
	})

	for _, node := range []string{c.ServerNode, c.AgentNode} {
		t.Run(node, func(t *testing.T) {
			ip, port := kubeletEndpoint(t, s, node)
			addr := net.JoinHostPort(ip, strconv.Itoa(port))
			// An agent's kubelet serves nothing until the cluster issued
			// its certificate (serverTLSBootstrap); the server's own
			// serves the one the server minted.
			var cert *x509.Certificate
			eventually(t, 2*time.Minute, node+"'s kubelet serving the certificate the cluster issued", func(ctx context.Context) (bool, error) {
				c, err := presentedCert(ctx, addr)
				cert = c
				return err == nil, err
			})
			if err := verifyServing(cert, []byte(kubeletCAPEM), ip); err != nil {
				t.Errorf("%s's serving certificate (issuer %s) against the kubelet-serving CA: %v", node, cert.Issuer, err)
			}
			t.Run("refused by clients that trust the API server's CA", func(t *testing.T) {
				for name, caPEM := range trusted {
					err := verifyServing(cert, caPEM, ip)
					var unknown x509.UnknownAuthorityError
					if !errors.As(err, &unknown) {
						t.Errorf("%s's serving certificate against %s: %v, want x509.UnknownAuthorityError", node, name, err)
					}
				}
			})
			t.Run("kubelet API", func(t *testing.T) { checkKubeletAPI(t, s, ip, port) })
		})
	}
}

// kubeconfigCA is the CA data of the kubeconfig at path (inline or a file).
func kubeconfigCA(t *testing.T, path string) []byte {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.CAData) > 0 {
		return cfg.CAData
	}
	return []byte(readFile(t, cfg.CAFile))
}

func pemCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// kubeletEndpoint is where node's kubelet listens for the API server: its
// InternalIP and its port.
func kubeletEndpoint(t *testing.T, s *server, node string) (string, int) {
	t.Helper()
	n, err := s.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address, int(n.Status.DaemonEndpoints.KubeletEndpoint.Port)
		}
	}
	t.Fatalf("node %s has no InternalIP: %v", node, n.Status.Addresses)
	return "", 0
}

// presentedCert is the serving certificate of the TLS server at addr.
func presentedCert(ctx context.Context, addr string) (*x509.Certificate, error) {
	conn, err := (&tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

// verifyServing verifies cert as a client trusting caPEM would for host.
func verifyServing(cert *x509.Certificate, caPEM []byte, host string) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no CA")
	}
	_, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// clientCertFor is a client certificate for cn in orgs from the cluster's
// client CA, which the kubelets trust for client certificates.
func clientCertFor(t *testing.T, s *server, cn string, orgs ...string) tls.Certificate {
	t.Helper()
	tlsDir := filepath.Join(s.dataDir, "tls")
	caCert, caKey, err := certs.LoadKeyPair(certs.KeyPair{Cert: filepath.Join(tlsDir, "client-ca.crt"), Key: filepath.Join(tlsDir, "client-ca.key")})
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// kubeletCaller is one identity calling a kubelet's API directly.
type kubeletCaller struct {
	name   string
	cert   *tls.Certificate
	bearer string
	want   int
}

// checkKubeletAPI calls the kubelet at ip:port as anonymous (401), as a user
// of the client CA without nodes/proxy rights and as a ServiceAccount (403),
// and as the API server (allowed: the control that the calls reach the
// kubelet), and checks that the read-only port is closed.
func checkKubeletAPI(t *testing.T, s *server, ip string, port int) {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{GenerateName: "kubelet-api-probe-"}}
	sa, err := s.client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.client.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plain := clientCertFor(t, s, "plain-user", "plain-group")
	tlsDir := filepath.Join(s.dataDir, "tls")
	apiserver, err := tls.LoadX509KeyPair(filepath.Join(tlsDir, "apiserver-kubelet-client.crt"), filepath.Join(tlsDir, "apiserver-kubelet-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	callers := []kubeletCaller{
		{name: "anonymous", want: http.StatusUnauthorized},
		{name: "a user without nodes/proxy", cert: &plain, want: http.StatusForbidden},
		{name: "a ServiceAccount", bearer: tr.Status.Token, want: http.StatusForbidden},
		{name: "the API server", cert: &apiserver, want: 0}, // anything but 401/403
	}
	requests := []struct{ method, path string }{
		{http.MethodGet, "/pods"},
		{http.MethodPost, "/exec/kube-system/any-pod/any-container?command=id&output=1"},
		{http.MethodPost, "/run/kube-system/any-pod/any-container?cmd=id"},
		{http.MethodGet, "/configz"},
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(readFile(t, filepath.Join(tlsDir, "kubelet-serving-ca.crt"))))
	base := "https://" + net.JoinHostPort(ip, strconv.Itoa(port))
	for _, c := range callers {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if c.cert != nil {
			cfg.Certificates = []tls.Certificate{*c.cert}
		}
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		for _, r := range requests {
			req, err := http.NewRequestWithContext(ctx, r.method, base+r.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.bearer != "" {
				req.Header.Set("Authorization", "Bearer "+c.bearer)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Errorf("%s %s %s: %v", c.name, r.method, r.path, err)
				continue
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
			switch {
			case c.want != 0 && resp.StatusCode != c.want:
				t.Errorf("%s %s %s = %d, want %d: %.200s", c.name, r.method, r.path, resp.StatusCode, c.want, body)
			case c.want == 0 && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden):
				t.Errorf("%s %s %s = %d, want it let through: %.200s", c.name, r.method, r.path, resp.StatusCode, body)
			case c.want == 0 && r.path == "/configz":
				checkConfigz(t, body)
			}
		}
		client.CloseIdleConnections()
	}

	conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "10255"), 5*time.Second)
	if err == nil {
		_ = conn.Close()
		t.Errorf("the read-only port %s:10255 accepts connections", ip)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("read-only port %s:10255: %v, want connection refused", ip, err)
	}
}

// checkConfigz checks the kubelet's own account of its API's settings.
func checkConfigz(t *testing.T, body []byte) {
	t.Helper()
	var cz struct {
		KubeletConfig struct {
			ReadOnlyPort   int32 `json:"readOnlyPort"`
			Authentication struct {
				Anonymous struct {
					Enabled bool `json:"enabled"`
				} `json:"anonymous"`
				Webhook struct {
					Enabled bool `json:"enabled"`
				} `json:"webhook"`
			} `json:"authentication"`
			Authorization struct {
				Mode string `json:"mode"`
			} `json:"authorization"`
		} `json:"kubeletconfig"`
	}
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&cz); err != nil {
		t.Errorf("configz: %v: %.200s", err, body)
		return
	}
	k := cz.KubeletConfig
	if k.ReadOnlyPort != 0 || k.Authentication.Anonymous.Enabled || !k.Authentication.Webhook.Enabled || k.Authorization.Mode != "Webhook" {
		t.Errorf("configz: readOnlyPort %d, anonymous %v, webhook authentication %v, authorization %q; want 0, false, true, Webhook",
			k.ReadOnlyPort, k.Authentication.Anonymous.Enabled, k.Authentication.Webhook.Enabled, k.Authorization.Mode)
	}
}
