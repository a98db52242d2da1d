package netpol

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/chain"
	"github.com/edgeplane/edgeplane/pkg/datastore"

	"github.com/edgeplane/edgeplane/internal/testenv"
)

// startAPIServer brings up certificates, SQLite and the API server chain in
// this process, as bootstrap does (as pkg/csrapprover's and pkg/controllers'
// tests do); the chain and datastore stop when t ends.
func startAPIServer(t *testing.T, ctx context.Context) *certs.PKI {
	t.Helper()
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, serviceCIDR, _ := net.ParseCIDR("10.43.0.0/16")
	pki, err := certs.Ensure(ctx, certs.Options{
		Dir: filepath.Join(dir, "tls"), KubeconfigDir: dir, ServiceCIDR: serviceCIDR,
		APIServerPort: l.Addr().(*net.TCPAddr).Port,
	})
	if err != nil {
		t.Fatal(err)
	}
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
	advertise, err := utilnet.ChooseHostInterface()
	testenv.Require(t, "a host address to advertise (an interface with a default route)", err)
	sc := store.Client()
	apiserver, err := chain.New(chain.Config{
		Listener: l, AdvertiseAddress: advertise, ServiceCIDR: serviceCIDR, ClusterDomain: "cluster.local",
		StateDir: filepath.Join(dir, "config"),
		Files: chain.Files{
			ServingCert: pki.APIServerServing.Cert, ServingKey: pki.APIServerServing.Key,
			ClusterCA: pki.ServerCA.Cert, ClientCA: pki.ClientCA.Cert, FrontProxyCA: pki.FrontProxyCA.Cert,
			FrontProxyClientCert: pki.FrontProxyClient.Cert, FrontProxyClientKey: pki.FrontProxyClient.Key,
			KubeletClientCert: pki.APIServerKubeletClient.Cert, KubeletClientKey: pki.APIServerKubeletClient.Key,
			ServiceAccountKey: pki.ServiceAccountKey, ServiceAccountPub: pki.ServiceAccountPub,
		},
		Storage: chain.Storage{Endpoints: sc.Endpoints, CAFile: sc.CAFile, CertFile: sc.CertFile, KeyFile: sc.KeyFile},
	})
	if err != nil {
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
	return pki
}
