// Package bootstrap starts edgeplane's components in order (certificates,
// datastore, API server chain), waits for each to be ready, and stops what
// started in reverse on failure or on shutdown.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/internal/gcpacer"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/chain"
	"github.com/edgeplane/edgeplane/pkg/datastore"
	"github.com/edgeplane/edgeplane/pkg/kubelet"
	"github.com/edgeplane/edgeplane/pkg/wear"
)

const (
	adminKubeconfigName = "admin.kubeconfig"
	// stopTimeout bounds each component's Stop on shutdown.
	stopTimeout = 30 * time.Second
)

// Run starts the control plane and blocks until ctx is cancelled (shutdown)
// or a component fails. It returns nil after a clean shutdown.
func Run(ctx context.Context, o CompletedOptions) error {
	gcPercent := tuneGoRuntime(ctx, o.Profile.GCPercent, o.HostMemory)
	s, err := start(ctx, o)
	if err != nil {
		return err
	}
	s.notifyReady(ctx)
	go paceGC(ctx, gcpacer.Config{
		BasePercent: gcPercent, BurstHeap: o.Profile.BurstHeap, RSSCeiling: o.Profile.BurstRSSCeiling,
	})
	go releaseStartupPagesAfter(ctx, startupPagesDelay)
	return s.wait(ctx)
}

// server is a started control plane.
type server struct {
	lock  *dataDirLock
	mgr   manager
	chain *chain.Server
	pki   *certs.PKI
	// checks are the /readyz checks of the components started after the chain.
	checks  map[string]*componentCheck
	started time.Time
	// kubelet is this server's own node's, when it runs one.
	kubelet *kubelet.Kubelet
}

// start runs every start-up phase; on error, what started is stopped and the
// data dir unlocked.
func start(ctx context.Context, o CompletedOptions) (_ *server, rerr error) {
	logger := klog.FromContext(ctx)
	s := &server{started: time.Now()}
	defer func() {
		if rerr != nil {
			_ = s.mgr.stopAll(context.WithoutCancel(ctx), stopTimeout)
			s.lock.release()
		}
	}()

	logger.Info("Starting edgeplane", "profile", o.Profile.Name, "datastore", o.Datastore)
	phase := time.Now()
	lock, err := prepareDataDir(o.DataDir)
	if err != nil {
		return nil, err
	}
	s.lock = lock
	listener, err := listen(o.BindAddress, o.HTTPSPort)
	if err != nil {
		return nil, err
	}
	port := listener.Addr().(*net.TCPAddr).Port
	listener = limitConnections(listener, o.Profile.MaxConnections, logger.WithName("api-port"))

	// --datastore-endpoint: started first, as it may hold the cluster's CAs (shared.go).
	shared, err := s.startShared(ctx, o)
	if err != nil {
		_ = listener.Close()
		return nil, err
	}
	// --cluster-init / --server: a joining server fetches the CAs first (etcdjoin.go).
	etcdJoin, err := s.prepareEtcdJoin(ctx, o)
	if err != nil {
		_ = listener.Close()
		return nil, err
	}
	pki, err := certs.Ensure(ctx, certOptions(o, port)) // see day2.go: renewals use the same
	if err != nil {
		_ = listener.Close()
		return nil, err
	}
	s.pki = pki
	s.mgr.record(ctx, "certs", time.Since(phase))

	var store datastore.Datastore
	if shared != nil {
		store = shared.store
	} else if store, err = datastore.New(datastore.Options{
		Type:               o.Datastore,
		DataDir:            o.DataDir,
		EtcdCAFile:         pki.EtcdCA.Cert,
		EtcdServerCertFile: pki.EtcdServer.Cert,
		EtcdServerKeyFile:  pki.EtcdServer.Key,
		EtcdClientCertFile: pki.EtcdClient.Cert,
		EtcdClientKeyFile:  pki.EtcdClient.Key,
		Cluster:            etcdJoin.datastoreCluster(),
	}); err != nil {
		_ = listener.Close()
		return nil, err
	} else if err := s.mgr.start(ctx, store, stopTimeout); err != nil {
		_ = listener.Close()
		return nil, err
	}

	wear.Register(filepath.Join(o.DataDir, "db"))
	storage := store.Client()
	day2, err := prepareDay2(ctx, o)
	if err != nil {
		_ = listener.Close()
		return nil, err
	}
	if err := shared.publish(ctx); err != nil {
		_ = listener.Close()
		return nil, err
	}
	s.checks = componentChecks(o)
	apiserver, err := chain.New(chain.Config{
		ReadyzChecks:       readyzChecks(s.checks),
		Day2:               day2,
		Listener:           listener,
		AdvertiseAddress:   o.AdvertiseAddress,
		ServiceCIDR:        o.ServiceCIDR,
		ClusterDomain:      o.ClusterDomain,
		SharedDatastore:    o.sharedDatastore(),
		StateDir:           filepath.Join(o.DataDir, "config"),
		CompactionInterval: o.CompactionInterval,
		Tuning:             o.Profile.Chain,
		Files:              chainFiles(pki),
		Storage: chain.Storage{
			Endpoints: storage.Endpoints,
			CAFile:    storage.CAFile,
			CertFile:  storage.CertFile,
			KeyFile:   storage.KeyFile,
			InProcess: storage.InProcess,
		},
	})
	if err != nil {
		_ = listener.Close()
		return nil, err
	}
	s.chain = apiserver
	if err := s.mgr.start(ctx, apiserver, stopTimeout); err != nil {
		return nil, err
	}
	if err := s.startControllers(ctx, o); err != nil {
		return nil, err
	}
	if err := s.startDay2(ctx, o, port, storage); err != nil {
		return nil, err
	}
	if err := s.startNodeJoin(ctx, o); err != nil { // cluster-info, kubeadm's ConfigMaps, the default node token
		return nil, err
	}
	if err := etcdJoin.publish(ctx, pki); err != nil {
		return nil, err
	}
	if err := s.publishNodeConfig(ctx, o); err != nil {
		return nil, err
	}
	if err := s.startNode(ctx, o, port); err != nil {
		return nil, err
	}

	if o.WriteKubeconfig != "" {
		if err := copyKubeconfig(pki.AdminKubeconfig, o.WriteKubeconfig, o.KubeconfigMode); err != nil {
			return nil, err
		}
	}
	kubeconfig := pki.AdminKubeconfig
	if o.WriteKubeconfig != "" {
		kubeconfig = o.WriteKubeconfig
	}
	logger.Info(fmt.Sprintf("edgeplane ready in %.1f s, kubeconfig at %s", time.Since(s.started).Seconds(), kubeconfig),
		"datastore", o.Datastore, "address", listener.Addr().String())
	return s, nil
}

// wait blocks until shutdown is asked for or the API server stops on its own,
// then stops everything in reverse order.
func (s *server) wait(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var cause error
	select {
	case <-ctx.Done():
		logger.Info("Shutting down: draining requests and watches")
	case <-s.chain.Done():
		cause = fmt.Errorf("apiserver stopped unexpectedly: %v", s.chain.Err())
		logger.Error(cause, "Shutting down")
	case <-s.kubeletDone():
		cause = fmt.Errorf("kubelet stopped unexpectedly: %v", s.kubelet.Err())
		logger.Error(cause, "Shutting down")
	}
	notifyStopping(ctx)
	begin := time.Now()
	err := s.mgr.stopAll(context.WithoutCancel(ctx), stopTimeout)
	s.lock.release()
	if err == nil {
		logger.Info("edgeplane stopped", "duration", time.Since(begin).Round(time.Millisecond))
	}
	return errors.Join(cause, err)
}

// kubeletDone is the kubelet's Done, or nil (never ready) without one.
func (s *server) kubeletDone() <-chan struct{} {
	if s.kubelet == nil {
		return nil
	}
	return s.kubelet.Done()
}

// chainFiles maps the PKI onto the files the chain needs.
func chainFiles(p *certs.PKI) chain.Files {
	return chain.Files{
		ServingCert:          p.APIServerServing.Cert,
		ServingKey:           p.APIServerServing.Key,
		ClusterCA:            p.ServerCA.Cert,
		ClientCA:             p.ClientCA.Cert,
		FrontProxyCA:         p.FrontProxyCA.Cert,
		FrontProxyClientCert: p.FrontProxyClient.Cert,
		FrontProxyClientKey:  p.FrontProxyClient.Key,
		KubeletClientCert:    p.APIServerKubeletClient.Cert,
		KubeletClientKey:     p.APIServerKubeletClient.Key,
		ServiceAccountKey:    p.ServiceAccountKey,
		ServiceAccountPub:    p.ServiceAccountPub,
	}
}

// kubeconfigCopy keeps --write-kubeconfig a copy of the admin kubeconfig.
// Start-up and the certificate renewer both write it: write serializes them,
// so the copy ends with the newest content.
type kubeconfigCopy struct {
	src, dst string
	mode     os.FileMode
	mu       sync.Mutex
}

// write copies src to dst now; a nil copy (no --write-kubeconfig) does nothing.
func (k *kubeconfigCopy) write() error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return copyKubeconfig(k.src, k.dst, k.mode)
}

// copyKubeconfig writes the admin kubeconfig to the user's chosen path,
// atomically and durably, through a temp file of its own (internal/atomicfile).
func copyKubeconfig(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("--write-kubeconfig: %w", err)
	}
	changed, err := atomicfile.Write(dst, data, mode)
	if err != nil {
		return fmt.Errorf("--write-kubeconfig: %w", err)
	}
	if !changed { // the same content, perhaps with another mode
		if err := os.Chmod(dst, mode); err != nil {
			return fmt.Errorf("--write-kubeconfig: %w", err)
		}
	}
	return nil
}
