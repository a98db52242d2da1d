// Package testapiserver starts the real API server chain for a package's
// tests: certificates, kine on SQLite and the chain (apiextensions ->
// kube-apiserver -> aggregator) on a port-0 loopback listener, in this
// process, as bootstrap starts them. Everything stops when the test ends.
//
//	srv := testapiserver.Start(t, ctx)
//	client := srv.Client(t)
package testapiserver

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/chain"
	"github.com/edgeplane/edgeplane/pkg/datastore"
)

// ServiceCIDR is the service CIDR the test server allocates from.
const ServiceCIDR = "10.43.0.0/16"

// Server is a started API server.
type Server struct {
	PKI *certs.PKI
	// Kubeconfig is the admin kubeconfig's path.
	Kubeconfig string
	// Dir is the server's data dir (a t.TempDir).
	Dir string
}

// Options tune StartWith.
type Options struct {
	// APIs makes API groups of edgeplane's own for the chain to serve
	// (chain.Config.APIs), once the PKI exists.
	APIs func(pki *certs.PKI) ([]chain.APIInstaller, error)
}

// Start brings up certificates, SQLite and the API server chain, and
// registers their stop with t.Cleanup.
func Start(t *testing.T, ctx context.Context) *Server {
	t.Helper()
	return StartWith(t, ctx, Options{})
}

// StartWith is Start with o.
func StartWith(t *testing.T, ctx context.Context, o Options) *Server {
	t.Helper()
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, serviceCIDR, _ := net.ParseCIDR(ServiceCIDR)
	pki, err := certs.Ensure(ctx, certs.Options{
		Dir: filepath.Join(dir, "tls"), KubeconfigDir: dir, ServiceCIDR: serviceCIDR,
		APIServerPort: l.Addr().(*net.TCPAddr).Port,
	})
	if err != nil {
		_ = l.Close()
		t.Fatal(err)
	}
	store, err := datastore.New(datastore.Options{Type: datastore.TypeSQLite, DataDir: dir})
	if err != nil {
		_ = l.Close()
		t.Fatal(err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := store.Start(startCtx); err != nil {
		_ = l.Close()
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
		_ = l.Close()
		t.Fatal(err)
	}
	advertise, err := utilnet.ChooseHostInterface()
	if err != nil {
		_ = l.Close()
	}
	testenv.Require(t, "a host address to advertise (an interface with a default route)", err)
	var apis []chain.APIInstaller
	if o.APIs != nil {
		if apis, err = o.APIs(pki); err != nil {
			_ = l.Close()
			t.Fatal(err)
		}
	}
	sc := store.Client()
	apiserver, err := chain.New(chain.Config{
		APIs:     apis,
		Listener: l, AdvertiseAddress: advertise, ServiceCIDR: serviceCIDR, ClusterDomain: "cluster.local",
		StateDir: filepath.Join(dir, "config"),
		Files: chain.Files{
			ServingCert: pki.APIServerServing.Cert, ServingKey: pki.APIServerServing.Key,
			KubeletCA: pki.KubeletServingCABundle, ClientCA: pki.ClientCA.Cert, FrontProxyCA: pki.FrontProxyCA.Cert,
			FrontProxyClientCert: pki.FrontProxyClient.Cert, FrontProxyClientKey: pki.FrontProxyClient.Key,
			KubeletClientCert: pki.APIServerKubeletClient.Cert, KubeletClientKey: pki.APIServerKubeletClient.Key,
			ServiceAccountKey: pki.ServiceAccountKey, ServiceAccountPub: pki.ServiceAccountPub,
		},
		Storage: chain.Storage{Endpoints: sc.Endpoints, CAFile: sc.CAFile, CertFile: sc.CertFile, KeyFile: sc.KeyFile},
	})
	if err != nil {
		_ = l.Close()
		t.Fatal(err)
	}
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
	return &Server{PKI: pki, Kubeconfig: pki.AdminKubeconfig, Dir: dir}
}

// Client is a clientset with the admin kubeconfig.
func (s *Server) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
