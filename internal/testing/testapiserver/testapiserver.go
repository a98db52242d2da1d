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

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/chain"
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
	// Chain is the running chain (its Informers are the API server's).
	Chain *chain.Server
}

// Options tune StartWith.
type Options struct {
	// APIs makes API groups of edgeplane's own for the chain to serve
	// (chain.Config.APIs), once the PKI exists.
	APIs func(pki *certs.PKI) ([]chain.APIInstaller, error)
	// Cluster makes the chain's cluster network (chain.Config.Cluster),
	// once the PKI exists.
	Cluster func(pki *certs.PKI) chain.ClusterNetwork
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
	store := startStore(t, ctx, dir)
	advertise, err := utilnet.ChooseHostInterface()
	if err != nil {
		_ = l.Close()
	}
	testenv.Require(t, "a host address to advertise (an interface with a default route)", err)
	cfg := chainConfig(pki, store, l, advertise, filepath.Join(dir, "config"))
	if o.APIs != nil {
		if cfg.APIs, err = o.APIs(pki); err != nil {
			_ = l.Close()
			t.Fatal(err)
		}
	}
	if o.Cluster != nil {
		cfg.Cluster = o.Cluster(pki)
	}
	apiserver := startChain(t, ctx, cfg)
	return &Server{PKI: pki, Kubeconfig: pki.AdminKubeconfig, Dir: dir, Chain: apiserver}
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
