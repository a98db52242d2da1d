package datastore

import (
	"context"
	"errors"
	"fmt"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/klog/v2"
)

// etcdStore runs a single-member etcd in process, loopback only.
type etcdStore struct {
	opts Options
	dir  string // <data-dir>/db/etcd

	mu     sync.Mutex
	run    *etcdRun // nil when stopped
	client ClientConfig
}

// etcdRun is one Start..Stop cycle.
type etcdRun struct {
	e        *embed.Etcd
	closeMu  sync.Once
	stopping atomic.Bool   // set by Stop; errors from then on are the stop's
	closed   chan struct{} // closed when e.Close returned

	failOnce sync.Once
	failed   chan struct{} // closed on the first error from e.Err(); failErr is then set
	failErr  error
}

func newEtcd(o Options, dbDir string) *etcdStore {
	return &etcdStore{opts: o, dir: filepath.Join(dbDir, "etcd")}
}

func (s *etcdStore) Name() string { return TypeEtcd }

func (s *etcdStore) Client() ClientConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	cc := s.client
	cc.Endpoints = append([]string(nil), cc.Endpoints...)
	return cc
}

func (s *etcdStore) Start(ctx context.Context) error {
	lg := klog.FromContext(ctx).WithValues("datastore", TypeEtcd)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil {
		return errors.New("datastore: etcd already started (or still stopping)")
	}
	if err := ensurePrivateDir(s.dir); err != nil {
		return err
	}
	if err := s.recoverInterruptedBootstrap(lg); err != nil {
		return err
	}

	// Free ports are picked by binding :0 and closing; another process may
	// grab one before etcd binds it, so retry on EADDRINUSE.
	var (
		e   *embed.Etcd
		err error
	)
	for attempt := 0; attempt < 5; attempt++ {
		var cfg *embed.Config
		cfg, err = s.config(klog.FromContext(ctx).WithName("etcd"))
		if err != nil {
			return err
		}
		if s.opts.Cluster != nil {
			if err = s.applyCluster(ctx, cfg, klog.FromContext(ctx).WithName("etcd")); err != nil {
				return err
			}
		}
		setWALSegmentSize()
		e, err = embed.StartEtcd(cfg)
		if err == nil || !isAddrInUse(err) {
			break
		}
		lg.V(vInfo).Info("Port taken, retrying", "err", err)
	}
	if err != nil {
		return fmt.Errorf("datastore: starting etcd in %s: %w", s.dir, err)
	}

	run := &etcdRun{e: e, closed: make(chan struct{}), failed: make(chan struct{})}
	go func() {
		// Err() is closed by e.Close once etcd is over.
		for err := range e.Err() {
			if err == nil {
				continue
			}
			if run.stopping.Load() {
				lg.V(vInfo).Info("Embedded etcd stopping", "err", err)
				continue
			}
			lg.Error(err, "Embedded etcd failed")
			run.fail(fmt.Errorf("datastore: etcd: %w", err))
		}
	}()
	go func() {
		// The member can stop without an error on Err(): a fatal raft or
		// storage problem, or a stop from inside (InjectFault).
		select {
		case <-e.Server.StopNotify():
			if !run.stopping.Load() {
				lg.Error(nil, "Embedded etcd stopped on its own")
				run.fail(errors.New("datastore: etcd: the member stopped"))
			}
		case <-run.closed:
		}
	}()
	s.run = run
	s.client = ClientConfig{
		Endpoints: []string{"https://" + e.Clients[0].Addr().String()},
		CAFile:    s.opts.EtcdCAFile,
		CertFile:  s.opts.EtcdClientCertFile,
		KeyFile:   s.opts.EtcdClientKeyFile,
		InProcess: etcdInProcess(e.Server),
	}
	lg.Info("Started embedded etcd", "dir", s.dir, "endpoint", s.client.Endpoints[0])
	return nil
}

// EtcdKeptFiles is how many WAL and snapshot files embedded etcd keeps
// beyond those it still needs: etcd never removes a WAL segment that holds
// entries after its last snapshot (it keeps those locked), so this bounds
// only the old ones (docs/reliability/storage.md).
const EtcdKeptFiles = 2

// EtcdWALSegmentBytes is the size of embedded etcd's WAL segments. etcd
// preallocates each segment and the next one, at 64 MB each by default, so
// an empty data dir took 123 MB of an SD card. A segment still holds any
// entry: etcd cuts a new one after the write that crosses the size (and a
// request is at most embed's MaxRequestBytes, 1.5 MiB). Crash safety does not depend on the size: every
// entry is fsynced before etcd acknowledges it, and a cut fsyncs the
// directory (TestCrashKillRestart, TestPowerCut).
const EtcdWALSegmentBytes = 4 * 1000 * 1000

var walSegmentOnce sync.Once

// setWALSegmentSize sets etcd's WAL segment size, a variable of etcd's wal
// package (it has no embed.Config field).
func setWALSegmentSize() {
	walSegmentOnce.Do(func() { wal.SegmentSizeBytes = EtcdWALSegmentBytes })
}

// config builds the embed config with fresh loopback ports.
func (s *etcdStore) config(lg logr.Logger) (*embed.Config, error) {
	clientPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "edgeplane"
	}

	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = s.dir
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(ZapLogger(lg))

	clientURL := url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort))}
	peerURL := url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(name)
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored once the member is initialized

	tlsInfo := transport.TLSInfo{
		CertFile:       s.opts.EtcdServerCertFile,
		KeyFile:        s.opts.EtcdServerKeyFile,
		TrustedCAFile:  s.opts.EtcdCAFile,
		ClientCertAuth: true,
	}
	cfg.ClientTLSInfo = tlsInfo
	// Nobody peers with this single member; TLS with client-cert auth keeps
	// other local users off the peer port.
	cfg.PeerTLSInfo = tlsInfo

	cfg.Metrics = "basic"
	cfg.EnableGRPCGateway = false
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "0" // off: the apiserver compacts
	cfg.SnapshotCount = 10000
	cfg.MaxWalFiles, cfg.MaxSnapFiles = EtcdKeptFiles, EtcdKeptFiles
	// A lone member elects itself once its randomized election timeout
	// passes: up to a second at etcd's 100 ms tick / 1 s election, all of it
	// on the start-up path. With no peers to mistake a slow link for a dead
	// leader, short timers only cost ~40 wake-ups a second. A cluster member
	// keeps etcd's defaults (applyCluster).
	cfg.TickMs, cfg.ElectionMs = singleMemberTickMs, singleMemberElectionMs
	// etcd acknowledges a write once its WAL entry is on disk; the bbolt
	// backend is a cache of the WAL that etcd commits every 100 ms and, after
	// a crash, brings up to date from the WAL. Each commit rewrites the
	// B+tree's right edge and the meta page (4 KiB pages): with many nodes
	// renewing Leases, a second's renewals share one commit.
	cfg.BackendBatchInterval = etcdBackendBatchInterval
	return cfg, nil
}

// etcdBackendBatchInterval is how often the embedded member commits its
// backend (etcd's default: 100 ms). Crash safety does not depend on it.
const etcdBackendBatchInterval = time.Second

func (s *etcdStore) Ready(ctx context.Context) error {
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	if run == nil {
		return errors.New("datastore: etcd not started")
	}
	select {
	case <-run.e.Server.ReadyNotify():
		if err := s.markBootstrapped(); err != nil {
			return err
		}
		return s.promote(ctx, run.e) // a new member of an etcd cluster (etcdcluster.go)
	case <-run.failed:
		return run.failErr
	case <-run.e.Server.StopNotify():
		return errors.New("datastore: etcd stopped before it became ready")
	case <-ctx.Done():
		return fmt.Errorf("datastore: etcd not ready: %w", context.Cause(ctx))
	}
}

// fail records the first reason the member ended on its own.
func (r *etcdRun) fail(err error) {
	r.failOnce.Do(func() {
		r.failErr = err
		close(r.failed)
	})
}

// Done is closed when the member, once started, fails or stops on its own;
// Err says why. Stop does not close it. Before Start it is nil.
func (s *etcdStore) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return nil
	}
	return s.run.failed
}

// Err is why the member ended, once Done is closed.
func (s *etcdStore) Err() error {
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	if run == nil {
		return nil
	}
	select {
	case <-run.failed:
		return run.failErr
	default:
		return nil
	}
}

// breakServing stops the member under the running server (InjectFault).
func (s *etcdStore) breakServing() error {
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	if run == nil {
		return errors.New("datastore: etcd not started")
	}
	run.e.Server.Stop()
	return nil
}

func (s *etcdStore) Stop(ctx context.Context) error {
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	if run == nil {
		return nil
	}
	run.closeMu.Do(func() {
		run.stopping.Store(true)
		go func() {
			// embed.Etcd.Close waits for the client servers, which wait for
			// the member to be ready or stopping: stop a member that never
			// became ready first, or Close waits for ever.
			select {
			case <-run.e.Server.ReadyNotify():
			default:
				run.e.Server.HardStop()
			}
			run.e.Close()
			close(run.closed)
		}()
	})
	select {
	case <-run.closed:
	case <-ctx.Done():
		return fmt.Errorf("datastore: waiting for etcd to stop: %w", context.Cause(ctx))
	}
	s.mu.Lock()
	if s.run == run {
		s.run = nil
	}
	s.mu.Unlock()
	return nil
}

// Raft timers of a single embedded member (etcd requires an election timeout
// of at least five ticks).
const (
	singleMemberTickMs     = 25
	singleMemberElectionMs = 125
)

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("datastore: picking a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}
