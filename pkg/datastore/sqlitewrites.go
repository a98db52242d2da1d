package datastore

import (
	"context"
	"database/sql/driver"
	"fmt"
)

// SQLite allows one writer at a time. kine writes in transactions that take
// SQLite's write lock when they begin (BEGIN IMMEDIATE, _txlock=immediate),
// and the API server sends its writes in parallel: the writers that find the
// lock taken sleep in SQLite's busy handler (1, 2, 5, 10, 15, 20, 25 ms ...)
// and try again, however soon the lock is free. Those sleeps were the long
// tail of create latency and of watch delivery under write load
// (docs/PERFORMANCE.md). writeSerialConn queues the writers in Go instead:
// a write transaction waits for a token before it begins and gives it back
// when it commits or rolls back, so each writer starts the moment the
// previous one is done. Reads are not affected (WAL mode). (kine's own
// LockWrites, which this replaces, covers only writes outside transactions.)

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

// writeSerialConn is a connection whose writes take the token: write
// transactions from begin to commit or rollback, and statements run with
// Exec outside a transaction (kine's writes there: compaction, gap fills,
// checkpoints).
type writeSerialConn struct {
	sqliteConn
	writes writeTokens
	inTx   bool // a write transaction holds the token
}

func (c *writeSerialConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if opts.ReadOnly {
		return c.sqliteConn.BeginTx(ctx, opts)
	}
	if err := c.writes.take(ctx); err != nil {
		return nil, err
	}
	tx, err := c.sqliteConn.BeginTx(ctx, opts)
	if err != nil {
		c.writes.give()
		return nil, err
	}
	c.inTx = true
	return &writeTx{Tx: tx, conn: c}, nil
}

func (c *writeSerialConn) ExecContext(ctx context.Context, text string, args []driver.NamedValue) (driver.Result, error) {
	if !c.inTx {
		if err := c.writes.take(ctx); err != nil {
			return nil, err
		}
		defer c.writes.give()
	}
	return c.sqliteConn.ExecContext(ctx, text, args)
}

// writeTx gives the token back when the transaction ends, whatever the
// outcome; database/sql ends each transaction once (also when its context
// ends first).
type writeTx struct {
	driver.Tx
	conn *writeSerialConn
}

func (t *writeTx) Commit() error   { return t.end(t.Tx.Commit) }
func (t *writeTx) Rollback() error { return t.end(t.Tx.Rollback) }

func (t *writeTx) end(f func() error) error {
	defer func() {
		t.conn.inTx = false
		t.conn.writes.give()
	}()
	return f()
}
