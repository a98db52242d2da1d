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
	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/gcpacer"
	"github.com/edgeplane/edgeplane/internal/logfilter"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/chain"
	"github.com/edgeplane/edgeplane/pkg/datastore"
	"github.com/edgeplane/edgeplane/pkg/nodetunnel"
	"github.com/edgeplane/edgeplane/pkg/resourcemetrics"
	"github.com/edgeplane/edgeplane/pkg/wear"
)

const (
	adminKubeconfigName = "admin.kubeconfig"
	// stopTimeout bounds each component's Stop on shutdown.
	stopTimeout = 30 * time.Second
)

// Run starts the control plane and blocks until ctx is cancelled (shutdown)
// or a component ends on its own. It returns nil after a clean shutdown, also
// one asked for during start-up, and a *component.EndedError naming the
// component when one ended.
func Run(ctx context.Context, o CompletedOptions) error {
	gcPercent := tuneGoRuntime(ctx, o.Profile.GCPercent, o.HostMemory)
	s, err := start(ctx, o)
	if err != nil {
		if ctx.Err() != nil { // a signal during start-up: what started is stopped
			klog.FromContext(ctx).Info("Stopped during start-up", "cause", context.Cause(ctx), "err", err.Error())
			return nil
		}
		return err
	}
	s.notifyReady(ctx)
	if err := s.startBackground(ctx, o, gcPercent); err != nil {
		return errors.Join(err, s.shutdown(ctx, nil))
	}
	return s.wait(ctx)
}

// server is a started control plane.
type server struct {
	lock  *dataDirLock
	mgr   component.Manager
	chain *chain.Server
	pki   *certs.PKI
	store datastore.Datastore
	// checks are the /readyz checks of the components started after the
	// chain; startup fails /readyz until start-up is complete.
	checks  map[string]*componentCheck
	startup *startupGate
	// kubeconfig is the --write-kubeconfig copy, nil without one.
	kubeconfig *kubeconfigCopy
	started    time.Time
	// nodeIPs are the server's own node's addresses; nil when it is not a
	// node.
	nodeIPs []net.IP
	// metrics is the resource metrics API, nil when disabled (metrics.go).
	metrics *resourcemetrics.Server
	// tunnel is the server's end of node tunnels (nodetunnel.go).
	tunnel *nodetunnel.Server
}

// start runs every start-up phase. One deferred cleanup undoes a failed
// start: the started components are stopped in reverse, the API listener is
// closed while start still owns it (until the chain takes it), and the data
// dir is unlocked.
func start(ctx context.Context, o CompletedOptions) (_ *server, rerr error) {
	logger := klog.FromContext(ctx)
	s := &server{started: time.Now(), startup: newStartupGate()}
	var listener net.Listener // owned by start until handed to the chain
	defer func() {
		if rerr == nil {
			return
		}
		_ = s.mgr.StopAll(context.WithoutCancel(ctx), stopTimeout)
		if listener != nil {
			_ = listener.Close()
		}
		s.lock.release()
	}()

	logger.Info("Starting edgeplane", "profile", o.Profile.Name, "datastore", o.Datastore)
	logEndpoint(ctx, o)
	phase := time.Now()
	lock, err := prepareDataDir(o.DataDir)
	if err != nil {
		return nil, err
	}
	s.lock = lock
	if listener, err = listen(o.BindAddress, o.HTTPSPort); err != nil {
		return nil, err
	}
	address := listener.Addr().String()
	port := listener.Addr().(*net.TCPAddr).Port
	listener = limitConnections(listener, o.Profile.MaxConnections, logger.WithName("api-port"))

	// --datastore-endpoint: started first, as it may hold the cluster's CAs (shared.go).
	shared, err := s.startShared(ctx, o)
	if err != nil {
		return nil, err
	}
	// --cluster-init / --server: a joining server fetches the CAs first (etcdjoin.go).
	etcdJoin, err := s.prepareEtcdJoin(ctx, o)
	if err != nil {
		return nil, err
	}
	pki, err := certs.Ensure(ctx, certOptions(o, port)) // see day2.go: renewals use the same
	if err != nil {
		return nil, err
	}
	s.pki = pki
	if o.WriteKubeconfig != "" {
		s.kubeconfig = &kubeconfigCopy{src: pki.AdminKubeconfig, dst: o.WriteKubeconfig, mode: o.KubeconfigMode}
	}
	s.mgr.Record(ctx, "certs", time.Since(phase))

	if err := s.startDatastore(ctx, o, shared, etcdJoin); err != nil {
		return nil, err
	}
	if err := s.shareKubeletCA(ctx, o, port, shared, etcdJoin); err != nil {
		return nil, err
	}
	logKubeletTrust(ctx, s.pki)
	wear.Register(filepath.Join(o.DataDir, "db"))
	storage := s.store.Client()
	day2, err := prepareDay2(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := shared.publish(ctx); err != nil {
		return nil, err
	}
	s.checks = componentChecks(o)
	if err := s.newNodeTunnel(); err != nil {
		return nil, err
	}
	if err := s.newMetrics(o); err != nil {
		return nil, err
	}
	apiserver, err := chain.New(s.chainConfig(o, listener, day2, storage))
	if err != nil {
		return nil, err
	}
	listener = nil // the chain's now: it closes it on a failed Start and on Stop
	s.chain = apiserver
	if err := s.mgr.Start(ctx, apiserver, stopTimeout); err != nil {
		return nil, err
	}
	if err := s.startAfterChain(ctx, o, port, storage, etcdJoin); err != nil {
		return nil, err
	}
	s.startup.open()
	kubeconfig := pki.AdminKubeconfig
	if o.WriteKubeconfig != "" {
		kubeconfig = o.WriteKubeconfig
	}
	logger.Info(fmt.Sprintf("edgeplane ready in %.1f s, kubeconfig at %s", time.Since(s.started).Seconds(), kubeconfig),
		"datastore", o.Datastore, "address", address)
	return s, nil
}

// startAfterChain runs the start-up steps that need the API server, in
// order. They run while /readyz still fails its start-up check: a client
// that sees 200 finds the tokens, the node settings and the kubeconfig.
//
// Node join (cluster-info, kubeadm's ConfigMaps, the default node token)
// needs only the API server, so it runs beside the controllers' start
// (0.3-0.7 s of a warm restart) instead of after it.
func (s *server) startAfterChain(ctx context.Context, o CompletedOptions, port int, storage datastore.ClientConfig, etcdJoin *etcdJoin) error {
	joinCtx, cancelJoin := context.WithCancel(ctx)
	joined := make(chan error, 1)
	go func() { joined <- s.startNodeJoin(joinCtx, o) }()
	waitJoin := sync.OnceValue(func() error { return <-joined })
	defer func() { cancelJoin(); _ = waitJoin() }() // a failed step returns only after it
	for _, step := range []func() error{
		func() error { return s.startControllers(ctx, o) },
		func() error { return s.startNodeTunnel(ctx) },
		func() error { return s.startDay2(ctx, o, port, storage) },
		func() error { return s.clearServiceEndpoint(ctx, o) },
		waitJoin,
		func() error { return etcdJoin.publish(ctx, s.pki) },
		func() error { return s.startLocalStorage(ctx, o) }, // before nodes are told to serve it
		func() error { return s.publishNodeConfig(ctx, o) },
		func() error { return s.startAddons(ctx, o) }, // manifests (CoreDNS), servicelb
		func() error { return s.startMetrics(ctx, o) },
		func() error { return s.grantNetworkPolicy(ctx, o) },
		func() error { return s.startNode(ctx, o, port) },
		func() error { return s.startIngress(ctx, o) },
		s.kubeconfig.write,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// startDatastore starts this server's datastore: the --datastore-endpoint
// one startShared started already, or a new one.
func (s *server) startDatastore(ctx context.Context, o CompletedOptions, shared *sharedStore, etcdJoin *etcdJoin) error {
	if shared != nil {
		s.store = shared.store
		return nil
	}
	store, err := datastore.New(datastore.Options{
		Type:               o.Datastore,
		DataDir:            o.DataDir,
		SQLiteSync:         o.SQLiteSynchronous,
		SQLiteCommitWindow: o.SQLiteCommitWindow,
		EtcdCAFile:         s.pki.EtcdCA.Cert,
		EtcdServerCertFile: s.pki.EtcdServer.Cert,
		EtcdServerKeyFile:  s.pki.EtcdServer.Key,
		EtcdClientCertFile: s.pki.EtcdClient.Cert,
		EtcdClientKeyFile:  s.pki.EtcdClient.Key,
		Cluster:            etcdJoin.datastoreCluster(),
	})
	if err != nil {
		return err
	}
	if err := s.mgr.Start(ctx, store, stopTimeout); err != nil {
		return err
	}
	s.store = store
	return nil
}

// chainConfig is the API server chain's configuration.
func (s *server) chainConfig(o CompletedOptions, listener net.Listener, day2 chain.Day2, storage datastore.ClientConfig) chain.Config {
	return chain.Config{
		ReadyzChecks:       append(readyzChecks(s.checks), s.startup),
		StartupChecks:      []string{s.startup.Name()},
		Day2:               day2,
		Listener:           listener,
		AdvertiseAddress:   o.AdvertiseAddress,
		NoServiceEndpoint:  !o.publishesEndpoint(),
		ServiceCIDR:        o.ServiceCIDR,
		ClusterDomain:      o.ClusterDomain,
		SharedDatastore:    o.sharedDatastore(),
		AllowPrivileged:    o.AllowPrivileged,
		StateDir:           filepath.Join(o.DataDir, "config"),
		CompactionInterval: o.CompactionInterval,
		Tuning:             o.Profile.Chain,
		Files:              chainFiles(s.pki),
		APIs:               s.apis(),
		Cluster:            s.clusterNetwork(),
		Storage: chain.Storage{
			Endpoints: storage.Endpoints,
			CAFile:    storage.CAFile,
			CertFile:  storage.CertFile,
			KeyFile:   storage.KeyFile,
			InProcess: storage.InProcess,
		},
	}
}

// startBackground starts the loops that run while the server does, as
// components the manager stops: the GC pacer, the release of the binary's
// start-up pages, and the datastore fault hook when a test asks for it.
func (s *server) startBackground(ctx context.Context, o CompletedOptions, gcPercent int) error {
	pacer := gcpacer.Config{BasePercent: gcPercent, BurstHeap: o.Profile.BurstHeap, RSSCeiling: burstRSSCeiling(o.Profile.BurstRSSCeiling, o.HostMemory)}
	tasks := []*background.Task{
		background.NewTask("gc-pacer", func(ctx context.Context) { paceGC(ctx, pacer) }),
		background.NewTask("startup-pages", func(ctx context.Context) { releaseStartupPagesAfter(ctx, startupPagesDelay) }),
	}
	if t := datastoreFaultTask(ctx, s.store); t != nil {
		tasks = append(tasks, t)
	}
	for _, t := range tasks {
		if err := s.mgr.StartBackground(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// wait blocks until shutdown is asked for or a component ends on its own
// (the API server chain, the datastore, the kubelet: every started Ender),
// then stops everything in reverse order.
func (s *server) wait(ctx context.Context) error {
	ended := s.mgr.Watch(ctx)
	if err := s.shutdown(ctx, ended); err != nil && ended == nil {
		return err
	}
	if ended != nil {
		// One line names the component; the stop's own errors were logged.
		return ended
	}
	return nil
}

// shutdown stops every started component in reverse order and unlocks the
// data dir; ended is the component that ended on its own, if one did.
func (s *server) shutdown(ctx context.Context, ended *component.EndedError) error {
	logger := klog.FromContext(ctx)
	logfilter.Stopping()
	if ended != nil {
		logger.Error(ended.Err, "A component stopped on its own: shutting down", "component", ended.Component)
	} else {
		logger.Info("Shutting down: draining requests and watches")
	}
	notifyStopping(ctx)
	begin := time.Now()
	err := s.mgr.StopAll(context.WithoutCancel(ctx), stopTimeout)
	s.lock.release()
	if err == nil {
		logger.Info("edgeplane stopped", "duration", time.Since(begin).Round(time.Millisecond))
	}
	return err
}

// chainFiles maps the PKI onto the files the chain needs.
func chainFiles(p *certs.PKI) chain.Files {
	return chain.Files{
		ServingCert:          p.APIServerServing.Cert,
		ServingKey:           p.APIServerServing.Key,
		KubeletCA:            p.KubeletServingCABundle,
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
