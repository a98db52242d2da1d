package datastore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/logstructured"
	"github.com/k3s-io/kine/pkg/logstructured/sqllog"
	"github.com/k3s-io/kine/pkg/util"
)

// sqliteMaxIdleConns is the idle connections kine keeps by default (its
// ConnectionPoolConfig is left zero): under load kine uses 10-15 at once.
const sqliteMaxIdleConns = 20

// newKineBackend creates kine's backend for cfg.Endpoint as kine's driver
// registry would, with the create fixes of kinefix.go; on SQLite, writes are
// serialized in Go and compiled statements are kept.
//
// SQLite allows one writer at a time. Without a lock in the process, kine's
// concurrent writers (the API server sends its writes in parallel) collide
// on SQLite's write lock, and the loser sleeps in SQLite's busy handler
// (1, 2, 5, 10, ... ms) before it tries again: that is the long tail of create
// latency and of watch delivery under write load (docs/PERFORMANCE.md). With
// kine's LockWrites the writers queue on a mutex instead and each starts the
// moment the previous one commits; reads are not affected (WAL mode).
//
// kine opens the database, creates its schema and checks it; its queries
// then run on a second handle whose connections keep their compiled
// statements (sqlitestmts.go), and kine's own handle is closed. The backend
// is assembled here from kine's parts, as NewVariant does, with its log
// wrapped in appendRecorder; the one NewVariant returns is never started.
func newKineBackend(ctx context.Context, wg *sync.WaitGroup, cfg *drivers.Config) (createRevisionFix, error) {
	scheme, dsn := util.SchemeAndAddress(cfg.Endpoint)
	if scheme != "sqlite" {
		_, backend, err := drivers.New(ctx, wg, cfg)
		return createRevisionFix{Backend: backend}, err
	}
	cfg.Scheme, cfg.DataSourceName = scheme, dsn
	_, dialect, err := sqlite.NewVariant(ctx, wg, "sqlite3", cfg)
	if err != nil {
		return createRevisionFix{}, err
	}
	dialect.LockWrites = true

	// kine's handle is closed first: with cgo, kine's SQLite is another
	// library, and closing its file would drop the locks of ours.
	if err := dialect.DB.Close(); err != nil {
		return createRevisionFix{}, fmt.Errorf("datastore: %w", err)
	}
	path, params, _ := strings.Cut(dsn, "?")
	if path, err = filepath.Abs(path); err != nil {
		return createRevisionFix{}, fmt.Errorf("datastore: %w", err)
	}
	if dialect.DB, err = openSQLiteCached(ctx, wg, "file://"+path+"?"+params); err != nil {
		return createRevisionFix{}, err
	}
	dialect.DB.SetMaxIdleConns(sqliteMaxIdleConns)
	backend := logstructured.New(appendRecorder{sqllog.New(dialect, wg, cfg)})
	return createRevisionFix{Backend: backend, recorded: true}, nil
}
