package datastore

import (
	"container/list"
	"context"
	"database/sql/driver"
)

// SQLite compiles every SQL text it runs into a program before it runs it,
// and kine's queries (nested WITH clauses over the kine table) take longer
// to compile than to run: kine passes SQL text to database/sql on every call
// and the pure-Go driver compiles it again each time, which was 14% of the
// process's CPU under a create load (docs/PERFORMANCE.md). The connector
// below keeps each connection's compiled statements, keyed by their text, and
// runs them again with new arguments: the same SQL, the same results, without
// the compile.

// stmtCacheSize is how many compiled statements a connection keeps. kine
// runs about 25 distinct texts (some with a LIMIT written into the text);
// the least recently used is dropped beyond this.
const stmtCacheSize = 64

// sqliteConn is what the connection wrappers need from the driver's
// connection, and give database/sql in turn: the interfaces it looks for,
// which modernc.org/sqlite implements.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachedStmt is a compiled statement that can run again once its rows are
// closed (modernc.org/sqlite resets it then).
type cachedStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

func newStmtCacheConn(conn sqliteConn, size int) *stmtCacheConn {
	return &stmtCacheConn{sqliteConn: conn, size: size, byText: map[string]*list.Element{}, lru: list.New()}
}

// stmtCacheConn is one connection with its compiled statements. database/sql
// never calls one driver connection from two goroutines at once, so it needs
// no lock of its own.
type stmtCacheConn struct {
	sqliteConn
	size   int
	byText map[string]*list.Element // of *stmtEntry; front = most recently used
	lru    *list.List
}

type stmtEntry struct {
	text string
	stmt cachedStmt
	busy bool // its rows are open: a second use compiles a one-off statement
}

// lookup returns the entry for text, compiling and keeping it if needed; nil
// when the kept statement is in use (rows of an earlier query still open in
// the same transaction) or cannot be kept.
func (c *stmtCacheConn) lookup(ctx context.Context, text string) (*stmtEntry, error) {
	if el, ok := c.byText[text]; ok {
		c.lru.MoveToFront(el)
		e := el.Value.(*stmtEntry)
		if e.busy {
			return nil, nil
		}
		return e, nil
	}
	s, err := c.sqliteConn.PrepareContext(ctx, text)
	if err != nil {
		return nil, err
	}
	cs, ok := s.(cachedStmt)
	if !ok {
		s.Close()
		return nil, nil
	}
	e := &stmtEntry{text: text, stmt: cs}
	c.byText[text] = c.lru.PushFront(e)
	for c.lru.Len() > c.size {
		c.drop(c.lru.Back())
	}
	return e, nil
}

// drop forgets a statement and frees it, unless its rows are still open:
// then closing the rows frees it.
func (c *stmtCacheConn) drop(el *list.Element) {
	e := el.Value.(*stmtEntry)
	c.lru.Remove(el)
	delete(c.byText, e.text)
	if !e.busy {
		e.stmt.Close()
	}
}

// forget drops e after a failed run, so the next run starts from a freshly
// compiled statement.
func (c *stmtCacheConn) forget(e *stmtEntry) {
	if el, ok := c.byText[e.text]; ok && el.Value == e {
		c.drop(el)
	}
}

func (c *stmtCacheConn) ExecContext(ctx context.Context, text string, args []driver.NamedValue) (driver.Result, error) {
	e, err := c.lookup(ctx, text)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return c.sqliteConn.ExecContext(ctx, text, args)
	}
	res, err := e.stmt.ExecContext(ctx, args)
	if err != nil {
		c.forget(e)
	}
	return res, err
}

func (c *stmtCacheConn) QueryContext(ctx context.Context, text string, args []driver.NamedValue) (driver.Rows, error) {
	e, err := c.lookup(ctx, text)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return c.sqliteConn.QueryContext(ctx, text, args)
	}
	rows, err := e.stmt.QueryContext(ctx, args)
	if err != nil {
		c.forget(e)
		return nil, err
	}
	e.busy = true
	return &cachedRows{Rows: rows, conn: c, entry: e}, nil
}

// Close frees the kept statements, then closes the connection.
func (c *stmtCacheConn) Close() error {
	for c.lru.Len() > 0 {
		c.drop(c.lru.Back())
	}
	return c.sqliteConn.Close()
}

// cachedRows frees its statement for the next run when closed.
type cachedRows struct {
	driver.Rows
	conn  *stmtCacheConn
	entry *stmtEntry
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.entry.busy = false
	if el, ok := r.conn.byText[r.entry.text]; !ok || el.Value != r.entry {
		// Dropped while the rows were open.
		r.entry.stmt.Close()
	} else if err != nil {
		r.conn.forget(r.entry)
	}
	return err
}
