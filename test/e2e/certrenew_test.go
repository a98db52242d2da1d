package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

// leafLifetime is the test-only lifetime of leaf certificates: renewal starts
// when a third is left, about 11 s before expiry.
const leafLifetime = 30 * time.Second

// TestCertRenewalWhileRunning runs a server (embedded etcd, so that the etcd
// server and client certificates renew too) whose leaf certificates live 30
// seconds, and checks that once every original leaf has expired the API
// server serves a renewed certificate, kubectl, a long-lived client with file
// certificates and the in-process controller-manager still work, and writes
// still reach etcd, all without a restart.
func TestCertRenewalWhileRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real server")
	}
	// Process-wide in client-go: set before the parallel tests run.
	transport.CertCallbackRefreshDuration = time.Second
	parallel(t, 35*time.Second)
	// For the server and the certs commands (rotate issues leaves too).
	env := []string{certs.LeafLifetimeEnv + "=" + leafLifetime.String()}
	dir := t.TempDir()
	s := startServerCmd(t, dir, withEnv(command(dir, "--datastore", "etcd", "--snapshot-schedule", ""), env...))
	tlsDir := filepath.Join(dir, "tls")

	// The latest expiry among the leaves at start: after it, every original is dead.
	var deadline time.Time
	for _, name := range []string{"apiserver", "apiserver-kubelet-client", "front-proxy-client", "admin",
		"controller-manager", "scheduler", "etcd/server", "etcd/client"} {
		if na := certFile(t, filepath.Join(tlsDir, name+".crt")).NotAfter; na.After(deadline) {
			deadline = na
		}
	}
	first := servingCert(t, s)

	// A long-lived client that names its certificate files, as the in-process
	// components' kubeconfigs do; like the server, it checks them often
	// (transport.CertCallbackRefreshDuration, set above).
	longLived, err := kubernetes.NewForConfig(&rest.Config{
		Host: s.config.Host,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   filepath.Join(tlsDir, "server-ca.crt"),
			CertFile: filepath.Join(tlsDir, "admin.crt"),
			KeyFile:  filepath.Join(tlsDir, "admin.key"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := longLived.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Logf("waiting until every original leaf has expired (%s)", time.Until(deadline).Round(time.Second))
	eventually(t, leafLifetime+time.Minute, "all original leaf certificates to expire", func(context.Context) (bool, error) {
		return time.Now().After(deadline.Add(time.Second)), nil
	})

	t.Run("the API server serves a renewed certificate", func(t *testing.T) {
		now := servingCert(t, s)
		if now.SerialNumber.Cmp(first.SerialNumber) == 0 {
			t.Fatal("still the first serving certificate")
		}
		if !time.Now().Before(now.NotAfter) {
			t.Fatalf("served certificate expired at %s", now.NotAfter)
		}
	})
	t.Run("kubectl with the rewritten admin kubeconfig", func(t *testing.T) {
		if out, err := s.kubectl("get", "namespaces"); err != nil || !strings.Contains(out, "kube-system") {
			t.Fatalf("kubectl get namespaces: %v\n%s", err, out)
		}
	})
	t.Run("a long-lived client reloads its certificate files", func(t *testing.T) {
		eventually(t, time.Minute, "a request with the renewed admin certificate", func(ctx context.Context) (bool, error) {
			_, err := longLived.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			return err == nil, err
		})
	})
	t.Run("the controller-manager and etcd keep working", func(t *testing.T) {
		mustKubectl(t, s, "create", "deployment", "renewed", "--image=nginx", "--replicas=2")
		// s.client embeds the admin certificate of the start: it has expired.
		eventually(t, 30*time.Second, "pods created by the controller-manager", func(ctx context.Context) (bool, error) {
			pods, err := longLived.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=renewed"})
			return err == nil && len(pods.Items) == 2, err
		})
	})
	t.Run("certs check", func(t *testing.T) {
		out := cliEnv(t, env, 1, "certs", "check", "--data-dir", dir)
		wantText(t, out, "8 expire within 30d")
		cliEnv(t, env, 0, "certs", "check", "--data-dir", dir, "--warn-within", "2s")
	})
	t.Run("certs rotate on a running server", func(t *testing.T) {
		before := certFile(t, filepath.Join(tlsDir, "apiserver.crt"))
		out := cliEnv(t, env, 0, "certs", "rotate", "--service", "apiserver", "--data-dir", dir)
		wantText(t, out, "Re-issued: apiserver\n")
		after := certFile(t, filepath.Join(tlsDir, "apiserver.crt"))
		if after.SerialNumber.Cmp(before.SerialNumber) == 0 {
			t.Fatal("apiserver certificate unchanged")
		}
		eventually(t, time.Minute, "the rotated serving certificate served", func(context.Context) (bool, error) {
			got := servingCert(t, s)
			return got.SerialNumber.Cmp(after.SerialNumber) == 0 || got.NotAfter.After(after.NotAfter), nil
		})
	})
	s.stop()
}

func certFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// servingCert is the certificate the API server presents on a new connection,
// verified against the cluster CA.
func servingCert(t *testing.T, s *server) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.config.CAData) {
		t.Fatal("kubeconfig holds no CA")
	}
	u, err := url.Parse(s.config.Host)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS to %s: %v", u.Host, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}
