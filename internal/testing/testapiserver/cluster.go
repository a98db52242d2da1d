package testapiserver

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/chain"
	"github.com/edgeplane/edgeplane/pkg/datastore"
)

// MemberOptions place one API server of a Cluster.
type MemberOptions struct {
	// Advertised listens on the host's address (the interface with the
	// default route) and publishes it in the `kubernetes` Service's
	// endpoints; otherwise the server listens on 127.0.0.1 and publishes
	// nothing (several servers of one host cannot share the one address the
	// Service's endpoints keep per host).
	Advertised bool
}

// Member is one running API server of a Cluster.
type Member struct {
	// Addr is where it listens, host:port.
	Addr   string
	server *chain.Server
}

// Stop stops the member's chain (its listener and every connection to it
// close); the cluster's other members go on.
func (m *Member) Stop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.server.Stop(ctx); err != nil {
		t.Error(err)
	}
}

// Cluster is several API servers sharing one PKI and one datastore (kine on
// SQLite), as the servers of one edgeplane cluster share them.
type Cluster struct {
	PKI *certs.PKI
	// Kubeconfig is the admin kubeconfig's path (its server is members[0]).
	Kubeconfig string
	Dir        string
	// Host is the host address advertised members listen on.
	Host    net.IP
	Members []*Member
}

// StartCluster starts one API server per entry of members, in order, each
// ready before the next starts; everything stops when the test ends.
func StartCluster(t *testing.T, ctx context.Context, members ...MemberOptions) *Cluster {
	t.Helper()
	host, err := utilnet.ChooseHostInterface()
	testenv.Require(t, "a host address to advertise (an interface with a default route)", err)
	dir := t.TempDir()
	listeners := make([]net.Listener, len(members))
	for i, m := range members {
		addr := "127.0.0.1:0"
		if m.Advertised {
			addr = net.JoinHostPort(host.String(), "0")
		}
		if listeners[i], err = net.Listen("tcp", addr); err != nil {
			t.Fatal(err)
		}
		l := listeners[i]
		t.Cleanup(func() { _ = l.Close() })
	}
	_, serviceCIDR, _ := net.ParseCIDR(ServiceCIDR)
	// Every member's serving certificate is the one pair: it covers
	// 127.0.0.1 and the host address, as each server's covers its own.
	pki, err := certs.Ensure(ctx, certs.Options{
		Dir: filepath.Join(dir, "tls"), KubeconfigDir: dir, ServiceCIDR: serviceCIDR,
		AdvertiseAddress: host, APIServerHost: listeners[0].Addr().(*net.TCPAddr).IP,
		APIServerPort: listeners[0].Addr().(*net.TCPAddr).Port,
	})
	if err != nil {
		t.Fatal(err)
	}
	store := startStore(t, ctx, dir)
	c := &Cluster{PKI: pki, Kubeconfig: pki.AdminKubeconfig, Dir: dir, Host: host}
	for i, m := range members {
		cfg := chainConfig(pki, store, listeners[i], host, filepath.Join(dir, "config-"+strconv.Itoa(i)))
		cfg.SharedDatastore = true
		cfg.NoServiceEndpoint = !m.Advertised
		c.Members = append(c.Members, &Member{Addr: listeners[i].Addr().String(), server: startChain(t, ctx, cfg)})
	}
	return c
}

// Config is an admin client configuration for member i, reached directly.
func (c *Cluster) Config(t testing.TB, i int) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("https://"+c.Members[i].Addr, c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Client is an admin clientset for member i, reached directly.
func (c *Cluster) Client(t testing.TB, i int) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config(t, i))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// startStore starts kine on SQLite in dir until the test ends.
func startStore(t *testing.T, ctx context.Context, dir string) datastore.Datastore {
	t.Helper()
	store, err := datastore.New(datastore.Options{Type: datastore.TypeSQLite, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := store.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := store.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	if err := store.Ready(startCtx); err != nil {
		t.Fatal(err)
	}
	return store
}

// chainConfig is the chain of a test server on l.
func chainConfig(pki *certs.PKI, store datastore.Datastore, l net.Listener, advertise net.IP, stateDir string) chain.Config {
	_, serviceCIDR, _ := net.ParseCIDR(ServiceCIDR)
	sc := store.Client()
	return chain.Config{
		Listener: l, AdvertiseAddress: advertise, ServiceCIDR: serviceCIDR, ClusterDomain: "cluster.local",
		StateDir: stateDir,
		Files: chain.Files{
			ServingCert: pki.APIServerServing.Cert, ServingKey: pki.APIServerServing.Key,
			KubeletCA: pki.KubeletServingCABundle, ClientCA: pki.ClientCA.Cert, FrontProxyCA: pki.FrontProxyCA.Cert,
			FrontProxyClientCert: pki.FrontProxyClient.Cert, FrontProxyClientKey: pki.FrontProxyClient.Key,
			KubeletClientCert: pki.APIServerKubeletClient.Cert, KubeletClientKey: pki.APIServerKubeletClient.Key,
			ServiceAccountKey: pki.ServiceAccountKey, ServiceAccountPub: pki.ServiceAccountPub,
		},
		Storage: chain.Storage{Endpoints: sc.Endpoints, CAFile: sc.CAFile, CertFile: sc.CertFile, KeyFile: sc.KeyFile},
	}
}

// startChain builds and starts the chain of cfg, ready, until the test ends.
func startChain(t *testing.T, ctx context.Context, cfg chain.Config) *chain.Server {
	t.Helper()
	apiserver, err := chain.New(cfg)
	if err != nil {
		_ = cfg.Listener.Close()
		t.Fatal(err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := apiserver.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := apiserver.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	if err := apiserver.Ready(startCtx); err != nil {
		t.Fatal(err)
	}
	return apiserver
}
