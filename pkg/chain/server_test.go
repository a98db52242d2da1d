package chain

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/datastore"
)

// promptly bounds how long Start and Stop may take once start-up is
// cancelled: a build takes seconds on a small host (~2.3 s measured here),
// and neither may wait for it.
const promptly = 500 * time.Millisecond

// TestStopDuringStart: a cancelled start-up (a SIGTERM) or a Stop while the
// chain is being built makes Start return at once with an error, Stop does
// not wait for the build, and the listener is released once the abandoned
// build ends. (Start used to hold the lock for the whole build, so Stop
// waited for it, and a cancelled ctx did not end it.)
func TestStopDuringStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a real chain on kine")
	}
	ctx := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0))))
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	env := newChainEnv(t, ctx)

	for _, tc := range []struct {
		name   string
		cancel func(startCancel context.CancelFunc, s *Server) // how start-up ends early
	}{
		{"start-up context cancelled", func(startCancel context.CancelFunc, _ *Server) { startCancel() }},
		{"Stop during the build", func(_ context.CancelFunc, s *Server) {
			stopCtx, c := context.WithTimeout(context.Background(), time.Minute)
			defer c()
			begin := time.Now()
			if err := s.Stop(stopCtx); err != nil {
				t.Errorf("Stop: %v", err)
			}
			if took := time.Since(begin); took > promptly {
				t.Errorf("Stop during the build took %s, want at most %s", took, promptly)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stateDir := filepath.Join(t.TempDir(), "config")
			s, addr := env.newServer(t, stateDir)
			startCtx, startCancel := context.WithCancel(ctx)
			defer startCancel()
			started := make(chan error, 1)
			go func() { started <- s.Start(startCtx) }()
			// Cancel once the build has begun: its first step writes the
			// authentication config into the state dir; the rest takes seconds.
			if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				entries, err := os.ReadDir(stateDir)
				return err == nil && len(entries) > 0, nil
			}); err != nil {
				t.Fatalf("the build did not begin: %v", err)
			}
			begin := time.Now()
			tc.cancel(startCancel, s)
			select {
			case err := <-started:
				if err == nil {
					t.Fatal("Start succeeded although start-up was cancelled")
				}
				t.Logf("Start: %v", err)
				if took := time.Since(begin); took > promptly {
					t.Errorf("Start returned %s after the cancel, want at most %s", took, promptly)
				}
			case <-time.After(time.Minute):
				t.Fatal("Start did not return within a minute of the cancel")
			}
			stopCtx, c := context.WithTimeout(context.Background(), time.Minute)
			defer c()
			if err := s.Stop(stopCtx); err != nil {
				t.Errorf("Stop after the cancelled start: %v", err)
			}
			// The abandoned build ends and releases the listener; the
			// chain never served.
			select {
			case <-s.Done():
			case <-time.After(2 * time.Minute):
				t.Fatal("the abandoned build did not end within 2 minutes")
			}
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				t.Errorf("%s still accepts connections after the abandoned start", addr)
			}
		})
	}
}

// chainEnv is what a chain needs: a PKI and a running kine.
type chainEnv struct {
	dir       string
	pki       *certs.PKI
	store     datastore.Datastore
	advertise net.IP
}

func newChainEnv(t *testing.T, ctx context.Context) *chainEnv {
	t.Helper()
	advertise, err := utilnet.ChooseHostInterface()
	testenv.Require(t, "a host address to advertise (an interface with a default route)", err)
	dir := t.TempDir()
	_, serviceCIDR, _ := net.ParseCIDR("10.43.0.0/16")
	pki, err := certs.Ensure(ctx, certs.Options{Dir: filepath.Join(dir, "tls"), KubeconfigDir: dir, ServiceCIDR: serviceCIDR, APIServerPort: 6443})
	if err != nil {
		t.Fatal(err)
	}
	store, err := datastore.New(datastore.Options{Type: datastore.TypeSQLite, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := store.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	if err := store.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return &chainEnv{dir: dir, pki: pki, store: store, advertise: advertise}
}

// newServer is a chain on a fresh loopback listener, its Config changed by
// adjust; it returns the address.
func (e *chainEnv) newServer(t *testing.T, stateDir string, adjust ...func(*Config)) (*Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, serviceCIDR, _ := net.ParseCIDR("10.43.0.0/16")
	p, sc := e.pki, e.store.Client()
	cfg := Config{
		Listener: l, AdvertiseAddress: e.advertise, ServiceCIDR: serviceCIDR, ClusterDomain: "cluster.local",
		StateDir: stateDir,
		Files: Files{
			ServingCert: p.APIServerServing.Cert, ServingKey: p.APIServerServing.Key,
			KubeletCA: p.KubeletServingCABundle, ClientCA: p.ClientCA.Cert, FrontProxyCA: p.FrontProxyCA.Cert,
			FrontProxyClientCert: p.FrontProxyClient.Cert, FrontProxyClientKey: p.FrontProxyClient.Key,
			KubeletClientCert: p.APIServerKubeletClient.Cert, KubeletClientKey: p.APIServerKubeletClient.Key,
			ServiceAccountKey: p.ServiceAccountKey, ServiceAccountPub: p.ServiceAccountPub,
		},
		Storage: Storage{Endpoints: sc.Endpoints, CAFile: sc.CAFile, CertFile: sc.CertFile, KeyFile: sc.KeyFile},
	}
	for _, f := range adjust {
		f(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, l.Addr().String()
}
