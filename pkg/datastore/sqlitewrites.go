package datastore

import (
	"context"
	"sync"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/server"
	"github.com/k3s-io/kine/pkg/util"
)

// newKineBackend creates kine's backend for cfg.Endpoint as kine's driver
// registry would, except that SQLite writes are serialized in Go.
//
// SQLite allows one writer at a time. Without a lock in the process, kine's
// concurrent writers (the API server sends its writes in parallel) collide
// on SQLite's write lock, and the loser sleeps in SQLite's busy handler
// (1, 2, 5, 10, ... ms) before it tries again: that is the long tail of create
// latency and of watch delivery under write load (docs/PERFORMANCE.md). With
// kine's LockWrites the writers queue on a mutex instead and each starts the
// moment the previous one commits; reads are not affected (WAL mode).
func newKineBackend(ctx context.Context, wg *sync.WaitGroup, cfg *drivers.Config) (server.Backend, error) {
	scheme, dsn := util.SchemeAndAddress(cfg.Endpoint)
	if scheme != "sqlite" {
		_, backend, err := drivers.New(ctx, wg, cfg)
		return backend, err
	}
	cfg.Scheme, cfg.DataSourceName = scheme, dsn
	backend, dialect, err := sqlite.NewVariant(ctx, wg, "sqlite3", cfg)
	if err != nil {
		return nil, err
	}
	dialect.LockWrites = true
	return backend, nil
}
