package datastore

import (
	"context"
	"database/sql/driver"
	"fmt"
)

// SQLite allows one writer at a time. kine writes in transactions, and the
// API server sends its writes in parallel: writers that find SQLite's write
// lock taken sleep in its busy handler (1, 2, 5, 10, 15, 20, 25 ms ...) and
// try again, however soon the lock is free. Those sleeps were the long tail
// of create latency and of watch delivery under write load
// (docs/PERFORMANCE.md). So writers queue in Go instead: a write transaction
// waits for a token before it begins and gives it back when it ends, so each
// writer starts the moment the previous one is done; and every write runs on
// one writer connection, in the shared transactions of sqlitegroup.go.
// Reads run on the pool's other connections beside the writes (WAL mode) and
// see only what has committed. (kine's own LockWrites, which this replaces,
// covers only writes outside transactions.)

// writeTokens is the one token for the database's writers.
type writeTokens chan struct{}

func newWriteTokens() writeTokens { return make(writeTokens, 1) }

// take waits for the token, or until ctx ends.
func (w writeTokens) take(ctx context.Context) error {
	select {
	case w <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("datastore: waiting to write: %w", context.Cause(ctx))
	}
}

func (w writeTokens) give() { <-w }

// writeSerialConn is a pooled connection. Its reads run on it; its write
// transactions (from begin to commit or rollback) and the writes it runs
// with Exec outside a transaction (kine's compaction, gap fills,
// checkpoints) run on the group's writer connection.
type writeSerialConn struct {
	sqliteConn
	group *commitGroup
	tx    *groupTx // the write transaction under way, if any
}

func (c *writeSerialConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if opts.ReadOnly {
		return c.sqliteConn.BeginTx(ctx, opts)
	}
	tx, err := c.group.begin(ctx)
	if err != nil {
		return nil, err
	}
	c.tx = tx
	return connTx{c}, nil
}

// connTx ends the connection's write transaction; database/sql ends each
// transaction once (also when its context ends first).
type connTx struct{ c *writeSerialConn }

func (t connTx) Commit() error {
	tx := t.c.tx
	t.c.tx = nil
	return tx.Commit()
}

func (t connTx) Rollback() error {
	tx := t.c.tx
	t.c.tx = nil
	return tx.Rollback()
}

func (c *writeSerialConn) ExecContext(ctx context.Context, text string, args []driver.NamedValue) (driver.Result, error) {
	if c.tx != nil {
		return c.tx.exec(ctx, text, args)
	}
	if !leaseWrite(text, args) && !isInsert(text) {
		return c.group.execAlone(ctx, text, args)
	}
	// A key's write outside a transaction: a transaction of its own.
	tx, err := c.group.begin(ctx)
	if err != nil {
		return nil, err
	}
	res, err := tx.exec(ctx, text, args)
	if err != nil {
		tx.Rollback()
		return nil, err
	}
	return res, tx.Commit()
}

func (c *writeSerialConn) QueryContext(ctx context.Context, text string, args []driver.NamedValue) (driver.Rows, error) {
	if c.tx != nil {
		return c.tx.query(ctx, text, args)
	}
	return c.sqliteConn.QueryContext(ctx, text, args)
}

func (c *writeSerialConn) PrepareContext(ctx context.Context, text string) (driver.Stmt, error) {
	if c.tx != nil {
		return c.tx.conn.PrepareContext(ctx, text)
	}
	return c.sqliteConn.PrepareContext(ctx, text)
}
