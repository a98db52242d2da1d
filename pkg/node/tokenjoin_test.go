package node

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	bootstrapsigner "k8s.io/kubernetes/pkg/controller/bootstrap"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/join"
	"github.com/edgeplane/edgeplane/pkg/kubeadmcompat"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// discoveryFixture is a real API server that publishes cluster-info, with
// upstream's bootstrap signer signing it for each token, and a node token
// pinned to its CA.
func discoveryFixture(t *testing.T, ctx context.Context) (*testapiserver.Server, nodetoken.Token, string) {
	t.Helper()
	srv := testapiserver.Start(t, ctx)
	admin := srv.Client(t)
	caPEM := mustRead(t, srv.PKI.ServerCA.Cert)
	cfg, err := kubeclient.Config(srv.Kubeconfig, "test", kubeclient.Steady)
	if err != nil {
		t.Fatal(err)
	}
	if err := kubeadmcompat.Ensure(ctx, admin, kubeadmcompat.Config{
		ServerURL: cfg.Host, CAPEM: caPEM, KubernetesVersion: "v1.37.2", ServiceCIDR: testapiserver.ServiceCIDR, ClusterDomain: "cluster.local",
	}); err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(admin, 0)
	signer, err := bootstrapsigner.NewSigner(admin, factory.Core().V1().Secrets(), factory.Core().V1().ConfigMaps(), bootstrapsigner.DefaultSignerOptions())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); signer.Run(runCtx) }()
	factory.Start(runCtx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown(); <-done })
	tok, err := nodetoken.Create(ctx, admin, nodetoken.CreateOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tok.CAHash = join.CAHash(caPEM)
	return srv, tok, cfg.Host
}

// TestTokenJoinDiscovery: the join trusts the server only through the
// token: with the right pin it returns the cluster CA, having written
// nothing; with another CA's pin it fails at once, naming the mismatch,
// and writes nothing; an unreachable server is retried, logged once a
// window, until the join is cancelled.
func TestTokenJoinDiscovery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the API server")
	}
	_, ctx := ktesting.NewTestContext(t)
	srv, tok, host := discoveryFixture(t, ctx)

	t.Run("pinned", func(t *testing.T) {
		j := &TokenJoin{Server: host, Token: tok, PrepareDir: func() error { t.Fatal("prepared the data dir during discovery"); return nil }}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		caPEM, err := j.discover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(caPEM) != string(mustRead(t, srv.PKI.ServerCA.Cert)) {
			t.Error("discovery returned another CA than the server's")
		}
	})

	t.Run("another CA's pin", func(t *testing.T) {
		bad := tok
		bad.CAHash = strings.Repeat("a", 64)
		dir := filepath.Join(t.TempDir(), "data")
		j := &TokenJoin{Server: host, Token: bad, PrepareDir: func() error { return os.MkdirAll(dir, 0o700) }}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := j.Ensure(ctx, "edge-x", PathsIn(filepath.Join(dir, DirName)))
		if err == nil || !strings.Contains(err.Error(), "does not match") {
			t.Fatalf("join with another CA's pin: %v, want the mismatch named", err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the data dir was prepared or written after a CA mismatch (%v)", err)
		}
	})

	t.Run("unreachable server", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close() // nothing listens there now
		j := &TokenJoin{Server: "https://" + addr, Token: tok, RetryWindow: time.Hour}
		ctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		_, err = j.discover(ctx)
		if err == nil || !strings.Contains(err.Error(), "not reached") {
			t.Fatalf("discovery of an unreachable server: %v, want it retried until cancelled", err)
		}
	})
}

// TestFetchCluster: a node reads the cluster's settings with its own
// credentials and writes the client CA its kubelet checks the API server's
// calls with; credentials the server refuses end the fetch at once (not
// after the two minutes a starting server gets).
func TestFetchCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the API server")
	}
	_, ctx := ktesting.NewTestContext(t)
	srv := testapiserver.Start(t, ctx)
	admin := srv.Client(t)
	want := nodeconfig.Config{ClientCA: []byte("client CA PEM\n"), ClusterDomain: "cluster.local", ClusterCIDR: "10.42.0.0/16",
		FlannelBackend: "vxlan", KubeProxyMode: "nftables", NodeLeaseDuration: 40 * time.Second}
	if err := nodeconfig.Publish(ctx, admin, want); err != nil {
		t.Fatal(err)
	}
	cfg, err := kubeclient.Config(srv.Kubeconfig, "test", kubeclient.Steady)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("with the node's credentials", func(t *testing.T) {
		p := PathsIn(t.TempDir())
		if _, err := certs.EnsureNodeClient(ctx, srv.PKI, "edge-a", p.CertDir, p.Kubeconfig, cfg.Host); err != nil {
			t.Fatal(err)
		}
		client, err := kubeclient.New(p.Kubeconfig, "test", kubeclient.Steady)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fetchCluster(ctx, []kubernetes.Interface{client}, p)
		if err != nil {
			t.Fatal(err)
		}
		if got.ClusterCIDR != want.ClusterCIDR || got.Network != (Network{FlannelBackend: "vxlan", KubeProxyMode: "nftables"}) || got.NodeLeaseDuration != want.NodeLeaseDuration {
			t.Errorf("cluster %+v, want the published settings", got)
		}
		if b := mustRead(t, p.ClientCA); string(b) != string(want.ClientCA) || got.ClientCAFile != p.ClientCA {
			t.Errorf("client CA file %s holds %q, want the published CA", got.ClientCAFile, b)
		}
	})

	// An agent restarting while the server it joined through is down
	// reaches the others its API endpoint kept on disk.
	t.Run("--server down, a kept server answers", func(t *testing.T) {
		p := PathsIn(t.TempDir())
		dead := closedServerURL(t)
		if _, err := certs.EnsureNodeClient(ctx, srv.PKI, "edge-c", p.CertDir, p.Kubeconfig, dead); err != nil {
			t.Fatal(err)
		}
		live := strings.TrimPrefix(cfg.Host, "https://")
		state := `{"servers":["` + strings.TrimPrefix(dead, "https://") + `","` + live + `"]}` + "\n"
		if err := os.WriteFile(p.APIServers, []byte(state), 0o600); err != nil {
			t.Fatal(err)
		}
		client, err := kubeclient.New(p.Kubeconfig, "test", kubeclient.Steady)
		if err != nil {
			t.Fatal(err)
		}
		others, err := savedServerClients(ctx, p, dead)
		if err != nil {
			t.Fatal(err)
		}
		if len(others) != 1 {
			t.Fatalf("%d clients of kept servers, want 1 (the live one; --server is not asked twice)", len(others))
		}
		fetchCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		got, err := fetchCluster(fetchCtx, append([]kubernetes.Interface{client}, others...), p)
		if err != nil {
			t.Fatalf("fetch with --server down and %s kept: %v", live, err)
		}
		if got.ClusterCIDR != want.ClusterCIDR {
			t.Errorf("cluster %+v, want the published settings", got)
		}
	})

	t.Run("a corrupt server list is ignored", func(t *testing.T) {
		p := PathsIn(t.TempDir())
		if err := os.MkdirAll(p.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p.APIServers, []byte(`{"servers":["no port"]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		others, err := savedServerClients(ctx, p, cfg.Host)
		if err != nil || len(others) != 0 {
			t.Fatalf("kept servers from a corrupt file: %d clients, %v; want none and no error", len(others), err)
		}
	})

	t.Run("refused credentials end at once", func(t *testing.T) {
		p := PathsIn(t.TempDir())
		// A certificate of a CA the server does not trust for clients.
		other, err := certs.Ensure(ctx, certs.Options{Dir: filepath.Join(t.TempDir(), "tls"), KubeconfigDir: t.TempDir(), APIServerPort: 6443})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := certs.EnsureNodeClient(ctx, other, "edge-b", p.CertDir, p.Kubeconfig, cfg.Host); err != nil {
			t.Fatal(err)
		}
		// Trust the real server's CA, so that only the client is wrong.
		kc := strings.ReplaceAll(string(mustRead(t, p.Kubeconfig)), other.ServerCA.Cert, srv.PKI.ServerCA.Cert)
		if err := os.WriteFile(p.Kubeconfig, []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		client, err := kubeclient.New(p.Kubeconfig, "test", kubeclient.Steady)
		if err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		_, err = fetchCluster(ctx, []kubernetes.Interface{client}, p)
		if err == nil || !strings.Contains(err.Error(), "Unauthorized") {
			t.Fatalf("fetch with refused credentials: %v, want Unauthorized", err)
		}
		if took := time.Since(begin); took > 10*time.Second {
			t.Errorf("a refusal took %s to end the fetch, want at once", took)
		}
	})
}

// closedServerURL is an https URL on loopback where nothing listens.
func closedServerURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "https://" + addr
}
