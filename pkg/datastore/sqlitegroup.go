package datastore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Group commit. At synchronous(FULL) every SQLite commit appends the pages
// it changed to the WAL and fsyncs it before kine answers. kine (v0.17.5)
// writes each key in a transaction of its own (SQLLog.Append: BEGIN, one
// INSERT, COMMIT), so every node's Lease renewal (every 10 s) would be a
// commit of its own: ~12 WAL frames (the table's last leaf, a leaf of each of kine's
// six indexes, the sequence row) and an fsync, however many other renewals
// arrived in the same few milliseconds (docs/PERFORMANCE.md, "What a node
// costs"). etcd's raft does that work once per batch of entries that arrive
// together.
//
// commitGroup runs every write transaction on one writer connection, each
// inside a savepoint of a SQLite transaction that the writers share: a
// writer that commits releases its savepoint and waits; the transaction
// commits (one COMMIT, one fsync, the pages the writes share written once)
// when no other writer is waiting to join it, and every writer in it hears
// of its commit only then: a power cut loses nothing acknowledged. The
// writers still run one at a time (the token), in the order they come, each
// seeing the writes before it, so kine's compare-and-swap (the INSERT's
// WHERE on the key's newest revision) decides as it did one commit at a
// time. A writer that rolls back undoes its savepoint alone. If the shared
// transaction is lost (a write failed with an I/O error or a full disk, or
// the COMMIT failed), every writer in it gets the error: nothing half-written
// and nothing acknowledged that is not on the disk.
//
// A transaction of Lease writes only (node heartbeats) may also stay open
// for the commit window (--sqlite-commit-window) after its last writer, for
// company: renewals of many nodes then share a commit even on a disk whose
// fsync is quick. Any other write that joins it commits it at once. Every
// open transaction is committed at the latest when its window (or, without
// one, minGroupAge) has passed since it began.
type commitGroup struct {
	writes writeTokens
	window time.Duration
	base   driver.Connector
	stmts  int

	waiting atomic.Int32 // writers waiting for the token

	// Under the token:
	conn   sqliteConn // the writer connection, opened on first use
	open   *openTx    // the shared SQLite transaction, nil when none
	broken error      // conn is unusable
}

// openTx is one shared SQLite transaction.
type openTx struct {
	deadline time.Time // committed by then at the latest
	members  int       // writers that released their savepoint into it
	leases   bool      // every one of them wrote Leases only
	done     chan struct{}
	err      error // set before done is closed
}

// minGroupAge bounds how long a shared transaction stays open for writers
// that are waiting for the token, when there is no commit window.
const minGroupAge = 20 * time.Millisecond

// The commits of write transactions and the transactions in them, on the
// API server's /metrics: their ratio is how many writes share an fsync.
var (
	groupCommits = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "edgeplane_sqlite_commits_total",
		Help:           "SQLite commits of kine's write transactions (each one fsync at synchronous=full).",
		StabilityLevel: metrics.ALPHA,
	})
	groupWrites = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "edgeplane_sqlite_write_transactions_total",
		Help:           "kine's write transactions committed on SQLite; divided by edgeplane_sqlite_commits_total, the writes per commit.",
		StabilityLevel: metrics.ALPHA,
	})
	registerGroupMetrics sync.Once
)

func newCommitGroup(base driver.Connector, stmts int, writes writeTokens, window time.Duration) *commitGroup {
	registerGroupMetrics.Do(func() { legacyregistry.MustRegister(groupCommits, groupWrites) })
	return &commitGroup{base: base, stmts: stmts, writes: writes, window: window}
}

// leasePrefix is where the API server keeps Leases (storage prefix
// "/registry", resource "leases"): node heartbeats and leader election.
const leasePrefix = "/registry/leases/"

// isInsert reports whether a statement is one of kine's INSERTs.
func isInsert(text string) bool {
	return strings.HasPrefix(strings.TrimLeft(text, " \t\r\n"), "INSERT INTO kine")
}

// leaseWrite reports whether a statement is one of kine's INSERTs of a
// Lease (its second argument is the key).
func leaseWrite(text string, args []driver.NamedValue) bool {
	if !isInsert(text) || len(args) < 2 {
		return false
	}
	key, ok := args[1].Value.(string)
	return ok && strings.HasPrefix(key, leasePrefix)
}

// take waits for the token, counted as waiting.
func (g *commitGroup) take(ctx context.Context) error {
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	return g.writes.take(ctx)
}

// writer returns the writer connection; with the token.
func (g *commitGroup) writer(ctx context.Context) (sqliteConn, error) {
	if g.broken != nil {
		return nil, g.broken
	}
	if g.conn == nil {
		conn, err := g.base.Connect(ctx)
		if err != nil {
			return nil, err
		}
		sc, ok := conn.(sqliteConn)
		if !ok {
			conn.Close()
			return nil, fmt.Errorf("datastore: the SQLite driver's connection (%T) lacks an interface database/sql needs", conn)
		}
		g.conn = newStmtCacheConn(sc, g.stmts)
	}
	return g.conn, nil
}

func (g *commitGroup) run(ctx context.Context, text string) error {
	_, err := g.conn.ExecContext(ctx, text, nil)
	return err
}

// begin starts a writer's transaction: the token, the shared transaction
// (begun if none is open), and a savepoint of its own in it.
func (g *commitGroup) begin(ctx context.Context) (*groupTx, error) {
	if err := g.take(ctx); err != nil {
		return nil, err
	}
	conn, err := g.writer(ctx)
	if err == nil && g.open == nil {
		if err = g.run(ctx, "BEGIN IMMEDIATE"); err == nil {
			g.startOpen()
		}
	}
	if err == nil {
		if err = g.run(ctx, "SAVEPOINT edgeplane_writer"); err != nil {
			g.fail(err)
		}
	}
	if err != nil {
		g.writes.give()
		return nil, err
	}
	return &groupTx{g: g, conn: conn, leases: true}, nil
}

// startOpen records a newly begun shared transaction and makes sure that it
// is committed by its deadline even if nobody else comes.
func (g *commitGroup) startOpen() {
	age := max(g.window, minGroupAge)
	o := &openTx{deadline: time.Now().Add(age), leases: true, done: make(chan struct{})}
	g.open = o
	time.AfterFunc(age, func() {
		g.writes <- struct{}{}
		if g.open == o {
			g.commit()
		}
		g.writes.give()
	})
}

// release gives the token back after a writer's transaction ended, first
// committing the shared transaction unless it should stay open: for a
// writer waiting to join it, or for the window of a Lease-only transaction.
func (g *commitGroup) release() {
	if o := g.open; o != nil {
		now := time.Now()
		switch {
		case now.Before(o.deadline) && g.waiting.Load() > 0:
		case now.Before(o.deadline) && o.leases && g.window > 0:
		default:
			g.commit()
		}
	}
	g.writes.give()
}

// commit commits the shared transaction and answers its writers; with the token.
func (g *commitGroup) commit() {
	o := g.open
	g.open = nil
	ctx := context.Background()
	if err := g.run(ctx, "COMMIT"); err != nil {
		o.err = fmt.Errorf("datastore: committing %d writes: %w", o.members, err)
		g.rollback(ctx)
	} else if o.members > 0 {
		groupCommits.Inc()
		groupWrites.Add(float64(o.members))
	}
	close(o.done)
}

// fail rolls the shared transaction back after err and answers its writers
// with err; with the token.
func (g *commitGroup) fail(err error) {
	o := g.open
	g.open = nil
	g.rollback(context.Background())
	if o != nil {
		o.err = fmt.Errorf("datastore: a write of the same commit failed, none of it was kept: %w", err)
		close(o.done)
	}
}

// rollback ends whatever transaction the writer connection is in; if it
// cannot, the connection is unusable from then on.
func (g *commitGroup) rollback(ctx context.Context) {
	if err := g.run(ctx, "ROLLBACK"); err != nil && !strings.Contains(err.Error(), "no transaction is active") {
		g.broken = fmt.Errorf("datastore: the SQLite writer connection is unusable: %w", err)
	}
}

// execAlone runs a write that cannot be in a transaction (a checkpoint,
// VACUUM) or is not a key's write (compaction's deletes outside a
// transaction), after committing any open one.
func (g *commitGroup) execAlone(ctx context.Context, text string, args []driver.NamedValue) (driver.Result, error) {
	if err := g.take(ctx); err != nil {
		return nil, err
	}
	defer g.writes.give()
	conn, err := g.writer(ctx)
	if err != nil {
		return nil, err
	}
	if g.open != nil {
		g.commit()
	}
	return conn.ExecContext(ctx, text, args)
}

// close commits what is open and closes the writer connection.
func (g *commitGroup) close() error {
	g.writes <- struct{}{}
	defer g.writes.give()
	if g.open != nil {
		g.commit()
	}
	if g.conn == nil {
		return nil
	}
	err := g.conn.Close()
	g.conn, g.broken = nil, errors.New("datastore: closed")
	return err
}

// groupTx is one writer's transaction: a savepoint in the shared one.
type groupTx struct {
	g      *commitGroup
	conn   sqliteConn
	leases bool // wrote only Leases so far
	ended  bool
}

// The writer's statements run to their end whatever its context does: an
// interrupted INSERT would roll back the whole shared transaction, the
// other writers' changes with it.

func (t *groupTx) exec(ctx context.Context, text string, args []driver.NamedValue) (driver.Result, error) {
	if !leaseWrite(text, args) {
		t.leases = false
	}
	return t.conn.ExecContext(context.WithoutCancel(ctx), text, args)
}

func (t *groupTx) query(ctx context.Context, text string, args []driver.NamedValue) (driver.Rows, error) {
	return t.conn.QueryContext(context.WithoutCancel(ctx), text, args)
}

// Commit releases the savepoint into the shared transaction, gives the
// token to the next writer, and waits for the shared commit.
func (t *groupTx) Commit() error {
	if t.ended {
		return errors.New("datastore: transaction already ended")
	}
	t.ended = true
	g := t.g
	o := g.open
	if o == nil { // not possible while the writer holds the token
		g.release()
		return errors.New("datastore: committing: no shared transaction is open")
	}
	if err := g.run(context.Background(), "RELEASE edgeplane_writer"); err != nil {
		g.fail(err)
		g.release()
		return fmt.Errorf("datastore: committing: %w", err)
	}
	o.members++
	o.leases = o.leases && t.leases
	g.release()
	<-o.done
	return o.err
}

// Rollback undoes the writer's savepoint alone.
func (t *groupTx) Rollback() error {
	if t.ended {
		return errors.New("datastore: transaction already ended")
	}
	t.ended = true
	g := t.g
	ctx := context.Background()
	err := g.run(ctx, "ROLLBACK TO edgeplane_writer")
	if err == nil {
		err = g.run(ctx, "RELEASE edgeplane_writer")
	}
	if err != nil {
		// The shared transaction is gone (SQLite rolled it back after an
		// I/O error or a full disk): so are the other writers' changes.
		g.fail(err)
	}
	g.release()
	return err
}
