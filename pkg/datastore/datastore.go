// Package datastore runs the key/value store behind the kube-apiserver: kine on
// SQLite (the default) or an embedded single-member etcd. Both speak the etcd3
// gRPC protocol to their clients.
package datastore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Datastore types accepted in Options.Type.
const (
	TypeSQLite = "sqlite"
	TypeEtcd   = "etcd"
)

// Datastore is a bootstrap component. Start launches the store and returns
// promptly; Ready returns nil once dependents may proceed; Stop is idempotent,
// valid in any state and bounded by its ctx.
type Datastore interface {
	Name() string // "sqlite" or "etcd"
	Start(ctx context.Context) error
	Ready(ctx context.Context) error
	Stop(ctx context.Context) error
	Client() ClientConfig // valid after Start
}

// ClientConfig tells an etcd3 client how to reach the datastore.
type ClientConfig struct {
	Endpoints []string // e.g. "unix:///abs/path/db/kine.sock" or "https://127.0.0.1:PORT"
	// TLS for etcd; empty for kine on a unix socket.
	CAFile, CertFile, KeyFile string
	// InProcess, for a datastore in this process, returns a client that
	// calls it without gRPC (inprocess.go); nil for an external one.
	InProcess InProcessClient
}

// Options configures New.
type Options struct {
	Type    string // "sqlite" (default) or "etcd"
	DataDir string // <data-dir>; the store lives under <data-dir>/db

	// etcd TLS from our PKI, provided by the caller.
	EtcdCAFile, EtcdServerCertFile, EtcdServerKeyFile, EtcdClientCertFile, EtcdClientKeyFile string

	// Endpoint, when set, overrides Type: an external etcd, PostgreSQL
	// through kine, or an explicit SQLite path (see external.go), with the
	// TLS files of an external etcd.
	Endpoint                                          string
	EndpointCAFile, EndpointCertFile, EndpointKeyFile string

	// SQLiteSync is how SQLite (the sqlite datastore, or a sqlite://
	// endpoint) syncs its commits: SyncFull (the default when empty) or
	// SyncNormal, faster but a power cut may lose acknowledged writes.
	SQLiteSync string
	// SQLiteCommitWindow is how long a Lease write may wait for other
	// writes to share its commit (sqlitegroup.go); 0 waits for none.
	SQLiteCommitWindow time.Duration

	// Cluster, with Type etcd, makes the embedded etcd a member of a
	// cluster of servers (etcdcluster.go).
	Cluster *EtcdCluster
}

// Validate reports every problem with o at once.
func (o *Options) Validate() []error {
	var errs []error
	if !slices.Contains([]string{"", SyncFull, SyncNormal}, o.SQLiteSync) {
		errs = append(errs, fmt.Errorf("--sqlite-synchronous %q is not one of: %s (the default: every commit on the disk before it is acknowledged), %s (faster, but a power cut may lose acknowledged writes)", o.SQLiteSync, SyncFull, SyncNormal))
	}
	if o.SQLiteCommitWindow < 0 || o.SQLiteCommitWindow > maxCommitWindow {
		errs = append(errs, fmt.Errorf("--sqlite-commit-window %s is not between 0 and %s", o.SQLiteCommitWindow, maxCommitWindow))
	}
	if o.Endpoint != "" {
		return append(errs, o.validateEndpoint()...)
	}
	typ := o.Type
	if typ == "" {
		typ = TypeSQLite
	}
	switch typ {
	case TypeSQLite:
		// kine hands "<path>?<params>" to SQLite as a file: URI without escaping it.
		if strings.ContainsAny(o.DataDir, "?#%") {
			errs = append(errs, fmt.Errorf("--data-dir %q: the characters ?, # and %% are not supported with the sqlite datastore", o.DataDir))
		}
	case TypeEtcd:
		if o.Cluster != nil {
			errs = append(errs, o.Cluster.Validate()...)
		}
		for _, f := range []struct{ flag, value string }{
			{"etcd CA certificate", o.EtcdCAFile},
			{"etcd server certificate", o.EtcdServerCertFile},
			{"etcd server key", o.EtcdServerKeyFile},
			{"etcd client certificate", o.EtcdClientCertFile},
			{"etcd client key", o.EtcdClientKeyFile},
		} {
			if f.value == "" {
				errs = append(errs, fmt.Errorf("--datastore etcd needs the %s file", f.flag))
			}
		}
	default:
		errs = append(errs, fmt.Errorf("--datastore %q is not one of: %s, %s", o.Type, TypeSQLite, TypeEtcd))
	}
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	return errs
}

var (
	_ Datastore = (*kineStore)(nil)
	_ Datastore = (*etcdStore)(nil)
)

// New returns the configured datastore without starting it.
func New(o Options) (Datastore, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, fmt.Errorf("datastore: resolving data dir: %w", err)
	}
	dbDir := filepath.Join(dataDir, "db")
	if o.Endpoint != "" {
		return newExternal(o, dbDir)
	}
	if o.Type == TypeEtcd {
		return newEtcd(o, dbDir), nil
	}
	return newKine(dbDir, o.sqliteSync(), o.SQLiteCommitWindow)
}

// SQLite synchronous modes accepted in Options.SQLiteSync.
const (
	SyncFull   = "full"
	SyncNormal = "normal"
)

// maxCommitWindow bounds --sqlite-commit-window: a Lease renewal (every
// 10 s, 40 s lease) must never wait long enough to matter to a node's health.
const maxCommitWindow = time.Second

// DefaultCommitWindow is --sqlite-commit-window's default (docs/PERFORMANCE.md,
// "Group commit and checkpoints").
const DefaultCommitWindow = 0

func (o *Options) sqliteSync() string {
	if o.SQLiteSync == "" {
		return SyncFull
	}
	return o.SQLiteSync
}
