package datastore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/logstructured"
	"github.com/k3s-io/kine/pkg/logstructured/sqllog"
	"github.com/k3s-io/kine/pkg/util"
	sqlite3 "modernc.org/sqlite"
)

// sqliteMaxIdleConns is the idle connections kine keeps by default (its
// ConnectionPoolConfig is left zero): under load kine uses 10-15 at once.
const sqliteMaxIdleConns = 20

// newKineBackend creates kine's backend for cfg.Endpoint as kine's driver
// registry would, with the create fixes of kinefix.go; on SQLite, writes are
// queued in Go (sqlitewrites.go), compiled statements are kept
// (sqlitestmts.go), and writes can reach watchers as they commit (sqlitewatch.go).
//
// kine opens the database, creates its schema and checks it; its own handle
// is then closed and its queries run on one opened by openSQLite. The backend
// is assembled here from kine's parts, as NewVariant does, with its log
// wrapped in commitFeed and appendRecorder; the one NewVariant returns is
// never started.
func newKineBackend(ctx context.Context, wg *sync.WaitGroup, cfg *drivers.Config, commitWindow time.Duration) (createRevisionFix, error) {
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

	// kine's handle is closed first: with cgo, kine's SQLite is another
	// library, and closing its file would drop the locks of ours.
	if err := dialect.DB.Close(); err != nil {
		return createRevisionFix{}, fmt.Errorf("datastore: %w", err)
	}
	path, params, _ := strings.Cut(dsn, "?")
	if path, err = filepath.Abs(path); err != nil {
		return createRevisionFix{}, fmt.Errorf("datastore: %w", err)
	}
	if dialect.DB, err = openSQLite(ctx, wg, "file://"+path+"?"+params, commitWindow); err != nil {
		return createRevisionFix{}, err
	}
	dialect.DB.SetMaxIdleConns(sqliteMaxIdleConns)
	feed := newCommitFeed(sqllog.New(dialect, wg, cfg), storedEvents(dialect.DB))
	backend := logstructured.New(appendRecorder{feed})
	return createRevisionFix{Backend: backend, recorded: true, feed: feed}, nil
}

// sqliteConnector opens connections that keep their compiled statements and
// queue their writes on one token for the whole database.
type sqliteConnector struct {
	base  driver.Connector
	stmts int // compiled statements each connection keeps
	group *commitGroup
}

// newSQLiteConnector wraps base: writes in shared transactions committed
// together (commit window: window), each connection keeping stmts compiled
// statements.
func newSQLiteConnector(base driver.Connector, stmts int, window time.Duration) sqliteConnector {
	return sqliteConnector{base: base, stmts: stmts, group: newCommitGroup(base, stmts, newWriteTokens(), window)}
}

// Close closes the writer connection, after committing what is open;
// database/sql calls it from DB.Close.
func (c sqliteConnector) Close() error { return c.group.close() }

// openSQLite opens dsn (modernc.org/sqlite's form) through sqliteConnector,
// its writes queued and committed together (commit window: window), closing
// the database when ctx ends; wg counts that goroutine.
func openSQLite(ctx context.Context, wg *sync.WaitGroup, dsn string, window time.Duration) (*sql.DB, error) {
	base, err := sqlite3.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("datastore: %w", err)
	}
	db := sql.OpenDB(newSQLiteConnector(base, stmtCacheSize, window))
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("datastore: opening %s: %w", dsn, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		db.Close()
	}()
	return db, nil
}

func (c sqliteConnector) Driver() driver.Driver { return c.base.Driver() }

func (c sqliteConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := conn.(sqliteConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("datastore: the SQLite driver's connection (%T) lacks an interface database/sql needs", conn)
	}
	return &writeSerialConn{sqliteConn: newStmtCacheConn(sc, c.stmts), group: c.group}, nil
}
