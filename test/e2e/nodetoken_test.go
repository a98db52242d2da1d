package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	kubeadmtoken "k8s.io/kubernetes/cmd/kubeadm/app/discovery/token"
	configutil "k8s.io/kubernetes/cmd/kubeadm/app/util/config"

	"github.com/edgeplane/edgeplane/pkg/join"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

const clusterInfoURLPath = "/api/v1/namespaces/kube-public/configmaps/cluster-info"

// TestNodeTokenE2E runs one server and checks, with real requests: the
// default node token file, anonymous access (cluster-info only), what a node
// token may and may not do, kubeadm's own discovery and config reading,
// nodetoken.Discover, the token CLI, and the default token's rotation after
// its Secret is deleted.
func TestNodeTokenE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	parallel(t, 30*time.Second)
	dir := t.TempDir()
	s := startServer(t, dir)
	ctx := context.Background()

	tok, ok, err := nodetoken.ReadFile(dir)
	if err != nil || !ok {
		t.Fatalf("no default node token when the server is ready: %v, %v", ok, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, nodetoken.FileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("node-token: %v, %v; want mode 0600", fi, err)
	}
	caPEM := s.config.CAData
	if tok.CAHash != join.CAHash(caPEM) {
		t.Fatalf("node-token pins CA %s, the cluster CA is %s", tok.CAHash, join.CAHash(caPEM))
	}
	if out := strings.TrimSpace(cli(t, 0, "token", "--node", "--data-dir", dir)); out != tok.String() {
		t.Fatalf("edgeplane token --node = %q, want the file's %q", out, tok.String())
	}

	t.Run("anonymous reaches cluster-info only", func(t *testing.T) {
		if _, err := s.client.CoreV1().ConfigMaps("kube-public").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "other"}, Data: map[string]string{"k": "v"},
		}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		c := httpClient(t, s, nil)
		for _, tc := range []struct {
			path string
			ok   bool
		}{
			{clusterInfoURLPath, true},
			{"/healthz", true},
			{"/api/v1/namespaces/kube-public/configmaps/other", false},
			{"/api/v1/namespaces/kube-public/configmaps", false},
			{"/api/v1/namespaces/kube-public/configmaps/cluster-info/", false},
			{"/api/v1/namespaces/kube-system/configmaps/kubeadm-config", false},
			{"/api/v1/namespaces/kube-system/secrets", false},
			{"/api/v1/watch/namespaces/kube-public/configmaps/cluster-info", false},
			{"/api", false},
			{"/version", false},
			{"/apis", false},
		} {
			code := get(t, c, s.config.Host+tc.path)
			if tc.ok && code != 200 || !tc.ok && code != 401 && code != 403 {
				t.Errorf("anonymous GET %s = %d, want %s", tc.path, code, map[bool]string{true: "200", false: "401 or 403"}[tc.ok])
			}
		}
	})

	t.Run("node token: CSR yes, server join data no", func(t *testing.T) {
		nc := tokenClient(t, s, tok.BootstrapToken())
		_, err := nc.CoreV1().Secrets("kube-system").Get(ctx, join.SecretName, metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("node token GET secrets/%s: %v, want 403 Forbidden", join.SecretName, err)
		}
		sar, err := s.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:bootstrap:" + tok.ID,
			Groups: []string{"system:bootstrappers", nodetoken.NodeGroup, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: "kube-system", Verb: "get", Resource: "secrets", Name: join.SecretName,
			},
		}}, metav1.CreateOptions{})
		if err != nil || sar.Status.Allowed {
			t.Errorf("SubjectAccessReview of the node token on the join Secret: %+v, %v; want denied", sar, err)
		}
		csr := &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-e2e-"},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				Request:    csrPEM(t, "system:node:e2e-token-node"),
				SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
				Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			},
		}
		if _, err := nc.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
			t.Errorf("node token cannot create a CSR: %v", err)
		}
		for _, name := range []string{"kubeadm-config", "kubelet-config"} {
			if _, err := nc.CoreV1().ConfigMaps("kube-system").Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Errorf("node token GET configmaps/%s: %v", name, err)
			}
		}
		if _, err := nc.CoreV1().Nodes().Get(ctx, "no-such-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("node token GET a missing node: %v, want 404 (allowed, as kubeadm:get-nodes says)", err)
		}
	})

	spki, err := nodetoken.SPKIHash(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(s.config.Host, "https://")
	t.Run("kubeadm discovery and config", func(t *testing.T) {
		discover := func(hash string) error {
			cfg, err := kubeadmtoken.RetrieveValidatedConfigInfo(nil, &kubeadmapi.Discovery{BootstrapToken: &kubeadmapi.BootstrapTokenDiscovery{
				Token: tok.BootstrapToken(), APIServerEndpoint: host, CACertHashes: []string{hash},
			}}, time.Minute)
			if err == nil && len(cfg.Clusters) != 1 {
				return errors.New("kubeadm got a kubeconfig without one cluster")
			}
			return err
		}
		if err := discover(spki); err != nil {
			t.Fatalf("kubeadm discovery with the right hash: %v", err)
		}
		wrong := "sha256:" + strings.Repeat("ab", 32)
		if err := discover(wrong); err == nil || !strings.Contains(err.Error(), "cluster CA found in cluster-info ConfigMap is invalid") {
			t.Fatalf("kubeadm discovery with a wrong hash: %v, want refused", err)
		}
		initCfg, err := configutil.FetchInitConfigurationFromCluster(tokenClient(t, s, tok.BootstrapToken()), nil, "e2e", false, false, true, false)
		if err != nil {
			t.Fatalf("kubeadm cannot read the cluster configuration with a node token: %v", err)
		}
		if initCfg.ClusterConfiguration.KubernetesVersion == "" || initCfg.ClusterConfiguration.Networking.ServiceSubnet != "10.43.0.0/16" {
			t.Errorf("kubeadm read ClusterConfiguration %+v", initCfg.ClusterConfiguration)
		}
		if _, ok := initCfg.ClusterConfiguration.ComponentConfigs["kubelet.config.k8s.io"]; !ok {
			t.Errorf("kubeadm read no kubelet configuration: %v", initCfg.ClusterConfiguration.ComponentConfigs)
		}
	})

	t.Run("Discover", func(t *testing.T) {
		got, err := nodetoken.Discover(ctx, s.config.Host, tok)
		if err != nil || string(got) != string(caPEM) {
			t.Fatalf("Discover with the default token: %v (CA equal: %v)", err, string(got) == string(caPEM))
		}
		viaSPKI, err := nodetoken.Token{ID: tok.ID, Secret: tok.Secret}.WithCAPin(spki)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodetoken.Discover(ctx, s.config.Host, viaSPKI); err != nil {
			t.Fatalf("Discover with kubeadm's pin: %v", err)
		}
		bad := tok
		bad.CAHash = strings.Repeat("0", 64)
		if _, err := nodetoken.Discover(ctx, s.config.Host, bad); !errors.Is(err, nodetoken.ErrCAMismatch) ||
			!strings.Contains(err.Error(), bad.CAHash) || !strings.Contains(err.Error(), tok.CAHash) {
			t.Fatalf("Discover with a wrong pin: %v, want ErrCAMismatch naming both hashes", err)
		}
		created, err := nodetoken.Parse(lastLine(cli(t, 0, "token", "create", "--data-dir", dir)))
		if err != nil {
			t.Fatal(err)
		}
		cli(t, 0, "token", "delete", "--data-dir", dir, created.ID)
		if _, err := nodetoken.Discover(ctx, s.config.Host, created); !errors.Is(err, nodetoken.ErrTokenUnknown) {
			t.Fatalf("Discover with a deleted token: %v, want ErrTokenUnknown", err)
		}
	})

	t.Run("token CLI", func(t *testing.T) {
		out := cli(t, 0, "token", "create", "--data-dir", dir, "--ttl", "1h", "--description", "e2e-cli", "--print-join-command")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "edgeplane agent --server https://127.0.0.1:") ||
			!strings.HasPrefix(lines[1], "kubeadm join 127.0.0.1:") || !strings.HasSuffix(lines[1], "--discovery-token-ca-cert-hash "+spki) {
			t.Fatalf("--print-join-command printed:\n%s", out)
		}
		fields := strings.Fields(lines[0])
		created, err := nodetoken.Parse(fields[len(fields)-1])
		if err != nil || created.CAHash != tok.CAHash {
			t.Fatalf("created token %+v, %v; want it pinned to the cluster CA", created, err)
		}
		if _, err := nodetoken.Discover(ctx, fields[3], created); err != nil {
			t.Fatalf("Discover with the created token at the printed server: %v", err)
		}
		list := cli(t, 0, "token", "list", "--data-dir", dir)
		if !containsLine(list, created.ID, "e2e-cli", "authentication,signing", nodetoken.NodeGroup) || !containsLine(list, tok.ID, "<forever>") {
			t.Fatalf("token list does not show both tokens:\n%s", list)
		}
		if strings.Contains(list, created.Secret) || strings.Contains(list, tok.Secret) {
			t.Fatalf("token list shows secrets:\n%s", list)
		}
		cli(t, 0, "token", "delete", "--data-dir", dir, created.ID)
		if list := cli(t, 0, "token", "list", "--data-dir", dir); strings.Contains(list, created.ID) {
			t.Fatalf("token list still shows the deleted token:\n%s", list)
		}
		if out := cli(t, 1, "token", "delete", "--data-dir", dir, created.ID, "NOT-AN-ID"); !strings.Contains(out, "no token with ID "+created.ID) || !strings.Contains(out, "is not a token ID") {
			t.Fatalf("deleting a deleted and a malformed ID: %s", out)
		}
		if out := cli(t, 1, "token", "create", "--data-dir", dir, "--ttl", "-1s", "--groups", "admins,"+join.ServersGroup); !strings.Contains(out, "negative") ||
			!strings.Contains(out, `"admins" is invalid`) || !strings.Contains(out, "joining servers' group") {
			t.Fatalf("invalid flags do not say every problem:\n%s", out)
		}
	})

	t.Run("a token past its TTL is refused", func(t *testing.T) {
		short, err := nodetoken.Parse(lastLine(cli(t, 0, "token", "create", "--data-dir", dir, "--ttl", "1s")))
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Minute, "the expired token to be refused and gone from the list", func(ctx context.Context) (bool, error) {
			_, err := nodetoken.Discover(ctx, s.config.Host, short)
			if !errors.Is(err, nodetoken.ErrTokenUnknown) {
				return false, err
			}
			_, err = tokenClient(t, s, short.BootstrapToken()).CoreV1().Nodes().Get(ctx, "x", metav1.GetOptions{})
			if !apierrors.IsUnauthorized(err) {
				return false, err
			}
			return !strings.Contains(cli(t, 0, "token", "list", "--data-dir", dir), short.ID), nil
		})
	})

	t.Run("a deleted default token is replaced at the next start", func(t *testing.T) {
		cli(t, 0, "token", "delete", "--data-dir", dir, tok.ID)
		s.stop()
		s2 := startServer(t, dir)
		next, ok, err := nodetoken.ReadFile(dir)
		if err != nil || !ok || next.ID == tok.ID {
			t.Fatalf("after a restart the default token is %+v (%v, %v); want a new one, the old one %s was revoked", next, ok, err, tok.ID)
		}
		if _, err := nodetoken.Discover(ctx, s2.config.Host, next); err != nil {
			t.Fatalf("Discover with the new default token: %v", err)
		}
		s2.stop()
		startServer(t, dir)
		again, _, err := nodetoken.ReadFile(dir)
		if err != nil || again != next {
			t.Fatalf("a restart changed a live default token: %+v -> %+v (%v)", next, again, err)
		}
	})
}

// tokenClient is a client of s that authenticates with a bootstrap token.
func tokenClient(t *testing.T, s *server, bearer string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(s.config)
	cfg.BearerToken = bearer
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// csrPEM is a PEM certificate request for a kubelet client certificate.
func csrPEM(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// containsLine reports whether one line of out has every part.
func containsLine(out string, parts ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}
