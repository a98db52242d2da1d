package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

// token runs `edgeplane token` on dataDir.
func token(t *testing.T, dataDir string) string {
	t.Helper()
	out, err := exec.Command(binary, "token", "--data-dir", dataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("edgeplane token: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// endpointIPs lists the addresses in the kubernetes Service's endpoints.
func endpointIPs(ctx context.Context, s *server) ([]string, error) {
	ep, err := s.client.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, sub := range ep.Subsets {
		for _, a := range sub.Addresses {
			ips = append(ips, a.IP)
		}
	}
	slices.Sort(ips)
	return ips, nil
}

// TestPostgresTwoServers runs two servers on one PostgreSQL: they share the
// CA, serve the same objects, and a watch on one sees writes through the other.
func TestPostgresTwoServers(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e")
	}
	parallel(t)
	dsn := startPostgres(t, "edgeplane")
	d1, d2 := t.TempDir(), t.TempDir()
	begin := time.Now()
	s1 := startServer(t, d1, "--datastore-endpoint", dsn, "--advertise-address", "192.0.2.10")
	t.Logf("first server ready after %v", time.Since(begin).Round(time.Millisecond))
	tok := token(t, d1)
	if !strings.HasPrefix(tok, "K10") || !strings.Contains(tok, "::server:") {
		t.Fatalf("edgeplane token printed %q", tok)
	}
	if fi, err := os.Stat(filepath.Join(d1, "token")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v", fi, err)
	}

	t.Run("refuses without the token", func(t *testing.T) {
		out, code := runToExit(t, t.TempDir(), "--datastore-endpoint", dsn, "--advertise-address", "192.0.2.12")
		if code == 0 || !strings.Contains(out, "already holds a cluster: pass its --token") {
			t.Fatalf("exit %d, output:\n%s", code, tail(out))
		}
	})
	t.Run("refuses a token pinning another CA", func(t *testing.T) {
		secret := tok[strings.Index(tok, "::server:")+len("::server:"):]
		bad := "K10" + strings.Repeat("0", 64) + "::server:" + secret
		out, code := runToExit(t, t.TempDir(), "--datastore-endpoint", dsn, "--token", bad, "--advertise-address", "192.0.2.12")
		if code == 0 || !strings.Contains(out, "does not match the token") {
			t.Fatalf("exit %d, output:\n%s", code, tail(out))
		}
	})
	t.Run("refuses a wrong secret", func(t *testing.T) {
		bad := tok[:strings.Index(tok, "::server:")] + "::server:not-the-cluster-secret"
		out, code := runToExit(t, t.TempDir(), "--datastore-endpoint", dsn, "--token", bad, "--advertise-address", "192.0.2.12")
		if code == 0 || !strings.Contains(out, "not this cluster's token") {
			t.Fatalf("exit %d, output:\n%s", code, tail(out))
		}
	})

	begin = time.Now()
	s2 := startServer(t, d2, "--datastore-endpoint", dsn, "--token", tok, "--advertise-address", "192.0.2.11")
	t.Logf("second server ready after %v", time.Since(begin).Round(time.Millisecond))
	for _, f := range []string{"tls/server-ca.crt", "tls/client-ca.key", "tls/sa.key", "tls/encryption-config.yaml", "tls/kubelet-serving-ca.key"} {
		a, _ := os.ReadFile(filepath.Join(d1, f))
		b, _ := os.ReadFile(filepath.Join(d2, f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Fatalf("%s differs between the servers", f)
		}
	}
	if got := token(t, d2); got != tok {
		t.Fatalf("second server's token %q, want %q", got, tok)
	}
	checkSharedCluster(t, s1, s2, []string{"192.0.2.10", "192.0.2.11"})

	// A server that stops takes its address out of the kubernetes endpoints
	// (the lease endpoint reconciler, which shared datastores keep on).
	s2.stop()
	eventually(t, time.Minute, "the stopped server to leave the kubernetes endpoints", func(ctx context.Context) (bool, error) {
		ips, err := endpointIPs(ctx, s1)
		return slices.Equal(ips, []string{"192.0.2.10"}), err
	})
}

// checkSharedCluster checks that two servers on one datastore serve the same
// objects, that a watch on b sees a write through a, that secrets written
// through one decrypt on the other, and that the endpoints list every server.
func checkSharedCluster(t *testing.T, a, b *server, wantIPs []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := b.client.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=shared"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Data: map[string]string{"from": "a"}}
	if _, err := a.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		got, ok := ev.Object.(*corev1.ConfigMap)
		if ev.Type != watch.Added || !ok || got.Data["from"] != "a" {
			t.Fatalf("watch through b saw %v %#v", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("watch through b saw nothing of the write through a")
	}

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, StringData: map[string]string{"k": "v"}}
	if _, err := b.client.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := a.client.CoreV1().Secrets("default").Get(ctx, "shared", metav1.GetOptions{})
	if err != nil || string(got.Data["k"]) != "v" {
		t.Fatalf("secret written through b, read through a: %v, %v", got, err)
	}

	eventually(t, time.Minute, fmt.Sprintf("kubernetes endpoints %v", wantIPs), func(ctx context.Context) (bool, error) {
		ips, err := endpointIPs(ctx, a)
		return slices.Equal(ips, wantIPs), err
	})
}

// externalEtcdPKI makes the certificates of an etcd the test runs itself:
// its CA, serving certificate, and the client certificate edgeplane uses.
func externalEtcdPKI(t *testing.T) *certs.PKI {
	t.Helper()
	tlsDir := filepath.Join(t.TempDir(), "tls")
	pki, err := certs.Ensure(context.Background(), certs.Options{
		Dir: tlsDir, KubeconfigDir: filepath.Dir(tlsDir), Hostname: "etcd", AdvertiseAddress: net.ParseIP("192.0.2.1"),
		ServiceCIDR: &net.IPNet{IP: net.ParseIP("10.43.0.0"), Mask: net.CIDRMask(16, 32)}, ClusterDomain: "cluster.local",
		APIServerPort: 6443, AdminKubeconfigMode: 0o600,
	})
	if err != nil {
		t.Fatal(err)
	}
	return pki
}

// TestExternalEtcd runs a server on a single-member etcd started by the test,
// over TLS with client certificates.
func TestExternalEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e")
	}
	parallel(t)
	pki := externalEtcdPKI(t)
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(t.TempDir(), "etcd")
	cfg.Name = "external"
	cfg.LogLevel = "error"
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:" + freePort(t)}
	client := url.URL{Scheme: "https", Host: "127.0.0.1:" + freePort(t)}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = "external=" + peer.String()
	cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = pki.EtcdServer.Cert, pki.EtcdServer.Key
	cfg.ClientTLSInfo.TrustedCAFile, cfg.ClientTLSInfo.ClientCertAuth = pki.EtcdCA.Cert, true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("external etcd not ready")
	}

	args := []string{"--datastore-endpoint", client.String(), "--datastore-cafile", pki.EtcdCA.Cert,
		"--datastore-certfile", pki.EtcdClient.Cert, "--datastore-keyfile", pki.EtcdClient.Key}
	t.Run("bad TLS flags", func(t *testing.T) {
		out, code := runToExit(t, t.TempDir(), append(args[:2:2], "--datastore-certfile", pki.EtcdClient.Cert, "--datastore-cafile", "/nonexistent")...)
		for _, want := range []string{"--datastore-certfile and --datastore-keyfile go together", "--datastore-cafile"} {
			if code == 0 || !strings.Contains(out, want) {
				t.Fatalf("exit %d, want %q in:\n%s", code, want, tail(out))
			}
		}
	})

	d1, d2 := t.TempDir(), t.TempDir()
	begin := time.Now()
	s1 := startServer(t, d1, append(args, "--advertise-address", "192.0.2.10")...)
	t.Logf("server on external etcd ready after %v", time.Since(begin).Round(time.Millisecond))
	s2 := startServer(t, d2, append(args, "--advertise-address", "192.0.2.11", "--token", token(t, d1))...)
	checkSharedCluster(t, s2, s1, []string{"192.0.2.10", "192.0.2.11"})

	// The data really is in the external etcd.
	resp, err := e.Server.KV().Range(context.Background(), []byte("/registry/configmaps/default/shared"), nil, mvcc.RangeOptions{})
	if err != nil || len(resp.KVs) != 1 {
		t.Fatalf("configmap in the external etcd: %v, %v", resp, err)
	}
}
