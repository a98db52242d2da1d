package datastore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

const (
	sqliteFile = "state.db"
	kineSocket = "kine.sock"

	// DSN parameters, in the pure-Go (modernc.org/sqlite) driver's own form:
	// kine passes _pragma and _txlock through to it unchanged, and the
	// statement cache (sqlitestmts.go) opens its connections with the same
	// string. Each _pragma runs on every new connection.
	//
	// journal_size_limit: SQLite never shrinks the -wal file by itself; after
	// a checkpoint it writes again from the start of the file, which keeps
	// the size of its largest burst (the startup VACUUM, a compaction, a
	// checkpoint held back by readers under load). With a limit, the WAL is
	// truncated back to it each time it is reset after a checkpoint (kine
	// checkpoints after every compaction and SQLite every 1000 pages), so
	// one burst does not keep its size on the card for good. See
	// docs/reliability/storage.md.
	//
	// wal_autocheckpoint: a checkpoint copies every page changed since the
	// last one into the database file, once each however often it changed.
	// SQLite's default (every 1000 pages, ~1 MiB of WAL at edgeplane's 1 KiB
	// pages) checkpointed every few seconds under 100 nodes' heartbeats,
	// copying the same index leaves again each time; every 8192 pages it
	// wrote 26% fewer bytes in all (docs/PERFORMANCE.md, "Group commit and
	// checkpoints"). The WAL then grows to ~8 MiB before it is reset, and
	// is truncated back to journal_size_limit.
	//
	// _kine_disable_startup_vacuum: kine (v0.17.5) VACUUMs the whole
	// database at every start, free pages or not. On a 16 MB database a
	// restart spent 0.6-0.7 s on it and wrote 38-54 MB; checkSQLite
	// vacuums only a database that is mostly free pages (startupVacuum).
	sqliteParams = "_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=journal_size_limit(4194304)&_pragma=wal_autocheckpoint(8192)&_txlock=immediate&_kine_disable_startup_vacuum=true"

	// synchronous(FULL), the default, fsyncs the WAL at every commit, so a
	// write is on the disk before kine acknowledges it: a power cut loses
	// nothing acknowledged. NORMAL (SyncNormal, --sqlite-synchronous=normal)
	// fsyncs only at checkpoints and may lose the writes since the last one
	// (TestPowerCut; figures in docs/reliability/powercut.md).
	sqliteSyncFull, sqliteSyncNormal = "_pragma=synchronous(FULL)", "_pragma=synchronous(NORMAL)"

	// maxUnixPath is the usable length of sockaddr_un.sun_path on Linux.
	maxUnixPath = 107
)

// kineStore runs kine on SQLite, serving etcd3 gRPC on a unix socket.
type kineStore struct {
	dbDir, dbPath, sockPath string
	// syncMode is SyncFull or SyncNormal.
	syncMode string
	// commitWindow is how long a Lease write waits for company (sqlitegroup.go).
	commitWindow time.Duration
	// dsn, when set, is a kine DSN other than SQLite (postgres://...),
	// served instead of dbPath.
	dsn string

	mu  sync.Mutex
	run *kineRun // nil when stopped
}

// kineRun is one Start..Stop cycle.
type kineRun struct {
	cancel    context.CancelFunc
	listened  chan struct{} // closed when endpoint.Listen returned; listenErr is then set
	listenErr error
	services  etcdServices  // what it serves, once listened without error
	listener  net.Listener  // the socket it serves on, once listened without error
	done      chan struct{} // closed when all kine goroutines exited and the database is closed

	ended *ended // kine stopped serving on its own
}

func newKine(dbDir, syncMode string, commitWindow time.Duration) (*kineStore, error) {
	s := &kineStore{
		syncMode:     syncMode,
		commitWindow: commitWindow,
		dbDir:        dbDir,
		dbPath:       filepath.Join(dbDir, sqliteFile),
		sockPath:     filepath.Join(dbDir, kineSocket),
	}
	if len(s.sockPath) > maxUnixPath {
		return nil, fmt.Errorf("datastore: socket path %s is longer than %d bytes; use a shorter --data-dir", s.sockPath, maxUnixPath)
	}
	return s, nil
}

func (s *kineStore) Name() string {
	if s.dsn != "" {
		return TypePostgres
	}
	return TypeSQLite
}

func (s *kineStore) Client() ClientConfig {
	return ClientConfig{Endpoints: []string{"unix://" + s.sockPath}, InProcess: s.inProcess}
}

// inProcess returns a client that calls kine's services in this process
// (inprocess.go), once they serve; its logger is ctx's.
func (s *kineStore) inProcess(ctx context.Context) (*clientv3.Client, error) {
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	if run == nil {
		return nil, errors.New("datastore: kine not started")
	}
	select {
	case <-run.listened:
	case <-ctx.Done():
		return nil, fmt.Errorf("datastore: kine not serving yet: %w", context.Cause(ctx))
	}
	if run.listenErr != nil {
		return nil, run.listenErr
	}
	select {
	case <-run.done:
		return nil, errors.New("datastore: kine has stopped")
	default:
	}
	return run.services.client(klog.FromContext(ctx)), nil
}

func (s *kineStore) Start(ctx context.Context) error {
	lg := klog.FromContext(ctx).WithValues("datastore", s.Name())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil {
		return errors.New("datastore: sqlite already started (or still stopping)")
	}

	if err := ensurePrivateDir(s.dbDir); err != nil {
		return err
	}
	if err := removeStaleSocket(s.sockPath); err != nil {
		return err
	}
	endpoint := "sqlite://" + s.dbPath + "?" + sqliteDSNParams(s.syncMode)
	if s.dsn != "" {
		endpoint = s.dsn
	} else if err := checkSQLite(ctx, s.dbPath); err != nil {
		return err
	}

	routeLogrus(klog.FromContext(ctx).WithName("kine"))
	wg := &sync.WaitGroup{}
	cfg := kineServeConfig{
		SocketPath: s.sockPath,
		Driver: drivers.Config{
			Endpoint: endpoint,
			// kine's own CLI defaults; its zero values are refused.
			CompactTimeout: 5 * time.Second,
			// Compact to the revision the API server asks, as etcd does
			// (kine's CLI keeps the newest 1000 whatever is asked, which
			// keeps continue tokens alive past upstream's promise).
			CompactMinRetain: 0,
			CompactBatchSize: 1000,
			PollBatchSize:    500,
			PollInterval:     time.Second,
			// The apiserver (>= 1.34) compacts through the etcd API itself.
			CompactInterval: 0,
			// nil: kine registers no metrics, so nothing collides with the
			// apiserver's legacyregistry.
			MetricsRegisterer: nil,
		},
		NotifyInterval: 5 * time.Second,
		CommitWindow:   s.commitWindow,
		ETCDVersion:    "3.6.11",
	}

	// kine gets its own context, cancelled only by Stop: the datastore
	// outlives the apiserver on shutdown.
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	run := &kineRun{cancel: cancel, listened: make(chan struct{}), done: make(chan struct{}), ended: newEnded()}
	cfg.ServeFailed = func(err error) { run.ended.end(fmt.Errorf("datastore: %w", err)) }
	s.run = run
	go func() {
		services, lis, err := serveKine(kctx, wg, cfg)
		if err != nil {
			err = fmt.Errorf("datastore: starting kine on %s: %w", s.dbPath, err)
			lg.Error(err, "Kine failed to start")
			cancel()
		}
		run.listenErr, run.services, run.listener = err, services, lis
		close(run.listened)
		// All wg.Add calls happen inside serveKine or while the counter is
		// non-zero, so waiting here is safe. On cancel the gRPC server stops
		// (graceful, up to 2s), then the backend, which closes the database.
		wg.Wait()
		close(run.done)
		lg.V(vInfo).Info("Kine stopped")
	}()
	if s.dsn != "" {
		lg.Info("Starting kine", "database", redact(s.dsn), "socket", s.sockPath)
	} else {
		lg.Info("Starting kine", "database", s.dbPath, "socket", s.sockPath)
	}
	return nil
}

func (s *kineStore) Ready(ctx context.Context) error {
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	if run == nil {
		return errors.New("datastore: sqlite not started")
	}
	select {
	case <-run.listened:
	case <-ctx.Done():
		return fmt.Errorf("datastore: kine not listening yet: %w", context.Cause(ctx))
	}
	if run.listenErr != nil {
		return run.listenErr
	}
	return waitForGet(ctx, s.Client(), run.done)
}

// Done is closed when kine, once started, stops serving on its own (its
// socket failed); Err says why. Stop does not close it. Before Start it is
// nil.
func (s *kineStore) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return nil
	}
	return s.run.ended.done
}

// Err is why kine stopped serving, once Done is closed.
func (s *kineStore) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return nil
	}
	return s.run.ended.get()
}

// breakServing closes kine's socket under it (InjectFault).
func (s *kineStore) breakServing() error {
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	if run == nil {
		return errors.New("datastore: kine not started")
	}
	<-run.listened
	if run.listener == nil {
		return errors.New("datastore: kine is not serving")
	}
	return run.listener.Close()
}

func (s *kineStore) Stop(ctx context.Context) error {
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	if run == nil {
		return nil
	}
	run.cancel()
	select {
	case <-run.done:
	case <-ctx.Done():
		return fmt.Errorf("datastore: waiting for kine to stop: %w", context.Cause(ctx))
	}
	s.mu.Lock()
	if s.run == run {
		s.run = nil
	}
	s.mu.Unlock()
	return nil
}

// ensurePrivateDir creates dir (and parents) and makes it 0700.
func ensurePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("datastore: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("datastore: %w", err)
	}
	return nil
}

// removeStaleSocket removes a socket file left behind by a crash. It refuses
// to touch a socket something still listens on, or a file that is not a socket.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("datastore: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("datastore: %s exists and is not a socket; remove it", path)
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return fmt.Errorf("datastore: %s is in use by another process; is edgeplane already running on this data dir?", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("datastore: removing stale socket: %w", err)
	}
	return nil
}

// sqliteDSNParams is sqliteParams with the synchronous mode syncMode.
func sqliteDSNParams(syncMode string) string {
	if syncMode == SyncNormal {
		return strings.Replace(sqliteParams, sqliteSyncFull, sqliteSyncNormal, 1)
	}
	return sqliteParams
}
