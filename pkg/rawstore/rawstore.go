// Package rawstore reads the datastore of a data dir below the API server,
// for the commands that work on it directly (snapshots, the encryption
// status): SQLite through the database file, which is safe next to a running
// kine (WAL mode), and etcd through its client API, either the running
// server's embedded etcd or, when no server runs, a temporary one started on
// the data dir.
package rawstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/klog/v2"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go

	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/datastore"
)

// Datastore kinds, as --datastore spells them.
const (
	SQLite = datastore.TypeSQLite
	Etcd   = datastore.TypeEtcd
)

// EndpointFile, under <data-dir>/db, holds the client URL of the running
// server's embedded etcd (its port is picked at each start).
const EndpointFile = "etcd.endpoint"

// Paths of the datastores in a data dir.
func SQLitePath(dataDir string) string { return filepath.Join(dataDir, "db", "state.db") }
func EtcdDir(dataDir string) string    { return filepath.Join(dataDir, "db", "etcd") }

// Detect tells which datastore dataDir holds. want ("" to detect) is checked
// against what exists.
func Detect(dataDir, want string) (string, error) {
	hasSQLite := exists(SQLitePath(dataDir))
	hasEtcd := exists(filepath.Join(EtcdDir(dataDir), "member"))
	switch {
	case want == SQLite && hasSQLite, want == Etcd && hasEtcd:
		return want, nil
	case want != "" && want != SQLite && want != Etcd:
		return "", fmt.Errorf("--datastore %q is not one of: %s, %s", want, SQLite, Etcd)
	case want != "":
		return "", fmt.Errorf("data dir %s holds no %s datastore", dataDir, want)
	case hasSQLite && hasEtcd:
		return "", fmt.Errorf("data dir %s holds both a sqlite and an etcd datastore: pass --datastore", dataDir)
	case hasSQLite:
		return SQLite, nil
	case hasEtcd:
		return Etcd, nil
	}
	return "", fmt.Errorf("data dir %s holds no datastore (no db/state.db, no db/etcd): has a server ever run on it?", dataDir)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// KV is one key and its current value.
type KV struct {
	Key   string
	Value []byte
}

// Store is an open datastore.
type Store struct {
	Kind    string
	DataDir string

	db   *sql.DB          // sqlite
	etcd *clientv3.Client // etcd
	stop func(context.Context) error
}

// Options configures Open.
type Options struct {
	DataDir string
	Kind    string // SQLite or Etcd
	// Running says a server holds the data dir: etcd is then reached through
	// EndpointFile, otherwise a temporary embedded etcd is started (the
	// caller must hold the data dir lock).
	Running bool
	// Etcd, when set, is how to reach a running etcd (used inside the server).
	Etcd *datastore.ClientConfig
}

// Open connects to the datastore of a data dir.
func Open(ctx context.Context, o Options) (*Store, error) {
	s := &Store{Kind: o.Kind, DataDir: o.DataDir}
	switch o.Kind {
	case SQLite:
		db, err := openSQLite(SQLitePath(o.DataDir))
		if err != nil {
			return nil, err
		}
		s.db = db
		return s, nil
	case Etcd:
		cc, err := s.etcdClientConfig(ctx, o)
		if err != nil {
			return nil, err
		}
		cli, err := newEtcdClient(cc)
		if err != nil {
			_ = s.Close(ctx)
			return nil, err
		}
		s.etcd = cli
		return s, nil
	}
	return nil, fmt.Errorf("rawstore: unknown datastore %q", o.Kind)
}

// openSQLite opens an existing database without creating it. Reads run in
// WAL mode next to kine's writes.
func openSQLite(path string) (*sql.DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("rawstore: %w", err)
	}
	dsn := (&url.URL{Scheme: "file", Path: path, RawQuery: "mode=rw&_pragma=busy_timeout(30000)"}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("rawstore: opening %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// etcdClientConfig finds the running etcd, or starts one on the data dir.
func (s *Store) etcdClientConfig(ctx context.Context, o Options) (datastore.ClientConfig, error) {
	if o.Etcd != nil {
		return *o.Etcd, nil
	}
	pki, err := certs.Layout(o.DataDir)
	if err != nil {
		return datastore.ClientConfig{}, err
	}
	if o.Running {
		b, err := os.ReadFile(filepath.Join(o.DataDir, "db", EndpointFile))
		if err != nil {
			return datastore.ClientConfig{}, fmt.Errorf("rawstore: the server runs but its etcd endpoint is unknown (%v): is it an etcd server?", err)
		}
		return datastore.ClientConfig{
			Endpoints: []string{strings.TrimSpace(string(b))},
			CAFile:    pki.EtcdCA.Cert, CertFile: pki.EtcdClient.Cert, KeyFile: pki.EtcdClient.Key,
		}, nil
	}
	ds, err := datastore.New(datastore.Options{
		Type: datastore.TypeEtcd, DataDir: o.DataDir,
		EtcdCAFile: pki.EtcdCA.Cert, EtcdServerCertFile: pki.EtcdServer.Cert, EtcdServerKeyFile: pki.EtcdServer.Key,
		EtcdClientCertFile: pki.EtcdClient.Cert, EtcdClientKeyFile: pki.EtcdClient.Key,
	})
	if err != nil {
		return datastore.ClientConfig{}, err
	}
	lctx := klog.NewContext(ctx, klog.FromContext(ctx).V(1))
	if err := ds.Start(lctx); err != nil {
		return datastore.ClientConfig{}, err
	}
	s.stop = ds.Stop
	readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := ds.Ready(readyCtx); err != nil {
		return datastore.ClientConfig{}, errors.Join(err, s.Close(ctx))
	}
	return ds.Client(), nil
}

func newEtcdClient(cc datastore.ClientConfig) (*clientv3.Client, error) {
	tlsInfo := transport.TLSInfo{TrustedCAFile: cc.CAFile, CertFile: cc.CertFile, KeyFile: cc.KeyFile}
	tlsCfg, err := tlsInfo.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("rawstore: etcd client TLS: %w", err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cc.Endpoints, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("rawstore: etcd client: %w", err)
	}
	return cli, nil
}

// Etcd is the etcd client (nil for SQLite).
func (s *Store) EtcdClient() *clientv3.Client { return s.etcd }

// DB is the SQLite database (nil for etcd).
func (s *Store) DB() *sql.DB { return s.db }

// List returns the current value of every live key under prefix.
func (s *Store) List(ctx context.Context, prefix string) ([]KV, error) {
	var out []KV
	if s.db != nil {
		// kine keeps every revision of a key as a row; the newest row of a
		// name is its current state.
		rows, err := s.db.QueryContext(ctx, `SELECT kv.name, kv.value FROM kine AS kv
			JOIN (SELECT MAX(id) AS id FROM kine WHERE name >= ? AND name < ? GROUP BY name) AS latest ON kv.id = latest.id
			WHERE kv.deleted = 0 ORDER BY kv.name`, prefix, prefix+"\xff")
		if err != nil {
			return nil, fmt.Errorf("rawstore: list %s: %w", prefix, err)
		}
		defer rows.Close()
		for rows.Next() {
			var kv KV
			if err := rows.Scan(&kv.Key, &kv.Value); err != nil {
				return nil, fmt.Errorf("rawstore: list %s: %w", prefix, err)
			}
			out = append(out, kv)
		}
		return out, rows.Err()
	}
	resp, err := s.etcd.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("rawstore: list %s: %w", prefix, err)
	}
	for _, kv := range resp.Kvs {
		out = append(out, KV{Key: string(kv.Key), Value: kv.Value})
	}
	return out, nil
}

// Close releases the connection and stops a temporary etcd.
func (s *Store) Close(ctx context.Context) error {
	var errs []error
	if s.db != nil {
		errs = append(errs, s.db.Close())
		s.db = nil
	}
	if s.etcd != nil {
		errs = append(errs, s.etcd.Close())
		s.etcd = nil
	}
	if s.stop != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		errs = append(errs, s.stop(stopCtx))
		cancel()
		s.stop = nil
	}
	return errors.Join(errs...)
}
