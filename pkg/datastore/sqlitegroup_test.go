package datastore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/k3s-io/kine/pkg/server"
	"k8s.io/component-base/metrics/testutil"
	sqlite3 "modernc.org/sqlite"
)

// groupCounts reads the group-commit counters.
func groupCounts(t *testing.T) (commits, writes float64) {
	t.Helper()
	c, err := testutil.GetCounterMetricValue(groupCommits)
	if err != nil {
		t.Fatal(err)
	}
	w, err := testutil.GetCounterMetricValue(groupWrites)
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// TestGroupCommitCompareAndSwap runs kine's read-modify-write of Leases from
// many writers at once, through kine's backend with a commit window, so that
// the writes share commits: every update that was acknowledged is there (each
// key's counter is the number of its acknowledged updates), and the writes
// did share commits.
func TestGroupCommitCompareAndSwap(t *testing.T) {
	ctx, b := startSQLiteBackendWindow(t, 30*time.Millisecond)
	const keys, writersPerKey, rounds = 8, 3, 8
	createCounters(ctx, t, b, keys)
	commits0, writes0 := groupCounts(t)
	racingIncrements(ctx, t, b, keys, writersPerKey, rounds, func(_ int, read *server.KeyValue, rev int64, _ *server.KeyValue, updated bool) error {
		if !updated {
			return nil // another writer's update came first: read again
		}
		if rev <= read.ModRevision {
			return fmt.Errorf("update of %s at %d answered revision %d", read.Key, read.ModRevision, rev)
		}
		return nil
	})
	for k := range keys {
		_, kv, err := b.Get(ctx, counterKey(k), 0, false)
		if err != nil || kv == nil {
			t.Fatalf("get %s: %v, %v", counterKey(k), kv, err)
		}
		if got, want := string(kv.Value), strconv.Itoa(writersPerKey*rounds); got != want {
			t.Errorf("%s counts %s acknowledged updates, want %s: an update was lost or applied twice", counterKey(k), got, want)
		}
	}
	commits, writes := groupCounts(t)
	commits, writes = commits-commits0, writes-writes0
	if writes < keys*writersPerKey*rounds {
		t.Errorf("%v writes counted, want at least %d", writes, keys*writersPerKey*rounds)
	}
	if writes < 2*commits {
		t.Errorf("%v writes in %v commits: the Lease writes did not share commits", writes, commits)
	}
	t.Logf("%v writes in %v commits", writes, commits)
}

// counterKey is the key of the k-th counter of racingIncrements.
func counterKey(k int) string { return fmt.Sprintf("%skube-node-lease/node-%d", leasePrefix, k) }

// createCounters creates keys counters (counterKey) at "0" through b.
func createCounters(ctx context.Context, t *testing.T, b server.Backend, keys int) {
	t.Helper()
	for k := range keys {
		if _, err := b.Create(ctx, counterKey(k), []byte("0"), 0); err != nil {
			t.Fatal(err)
		}
	}
}

// racingIncrements has writersPerKey writers per counter (createCounters)
// add 1 to theirs rounds times by kine's read-modify-write (Get, then Update
// at the read revision), reading again after a lost race. answered checks
// each Update's answer to a writer that read read.
func racingIncrements(ctx context.Context, t *testing.T, b server.Backend, keys, writersPerKey, rounds int,
	answered func(w int, read *server.KeyValue, rev int64, cur *server.KeyValue, updated bool) error) {
	t.Helper()
	inParallel(t, keys*writersPerKey, func(w int) error {
		k := counterKey(w % keys)
		for round := 0; round < rounds; {
			_, kv, err := b.Get(ctx, k, 0, false)
			if err != nil || kv == nil {
				return fmt.Errorf("get %s: %v, %v", k, kv, err)
			}
			n, err := strconv.Atoi(string(kv.Value))
			if err != nil {
				return fmt.Errorf("%s holds %q", k, kv.Value)
			}
			rev, cur, updated, err := b.Update(ctx, k, []byte(strconv.Itoa(n+1)), kv.ModRevision, 0)
			if err != nil {
				return fmt.Errorf("update %s at %d: %v", k, kv.ModRevision, err)
			}
			if err := answered(w, kv, rev, cur, updated); err != nil {
				return err
			}
			if updated {
				round++
			}
		}
		return nil
	})
}

// openGroupDB opens a database whose writes go through a commit group with
// window, with a table shaped like kine's for leaseWrite: kine(x UNIQUE, name).
func openGroupDB(t *testing.T, window time.Duration) (*sql.DB, *commitGroup) {
	t.Helper()
	base, err := sqlite3.NewConnector("file://" + filepath.Join(t.TempDir(), "g.db") + "?" + sqliteParams)
	if err != nil {
		t.Fatal(err)
	}
	c := newSQLiteConnector(base, stmtCacheSize, window)
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE kine (x INTEGER UNIQUE, name TEXT)`); err != nil {
		t.Fatal(err)
	}
	return db, c.group
}

const groupInsert = `INSERT INTO kine(x, name) VALUES (?, ?)`

// waitMembers waits (bounded) until the open shared transaction holds n
// committed writers.
func waitMembers(t *testing.T, g *commitGroup, n int) {
	t.Helper()
	for range 500 {
		g.writes <- struct{}{}
		got := 0
		if g.open != nil {
			got = g.open.members
		}
		g.writes.give()
		if got == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the shared transaction never held %d writers", n)
}

func countRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM kine`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGroupCommitConstraintError: a writer whose INSERT fails on a
// constraint rolls back its own savepoint; the writers around it commit,
// together.
func TestGroupCommitConstraintError(t *testing.T) {
	db, g := openGroupDB(t, time.Minute)
	lease := leasePrefix + "kube-node-lease/n"
	commits0, writes0 := groupCounts(t)
	first := make(chan error, 1)
	go func() { _, err := db.Exec(groupInsert, 1, lease); first <- err }()
	waitMembers(t, g, 1)
	if _, err := db.Exec(groupInsert, 1, lease); err == nil || !strings.Contains(err.Error(), "UNIQUE") {
		t.Fatalf("duplicate write: %v, want a UNIQUE constraint error", err)
	}
	// Not a Lease: commits the shared transaction at once, the first with it.
	if _, err := db.Exec(groupInsert, 2, "/registry/pods/default/p"); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first write: %v", err)
	}
	if n := countRows(t, db); n != 2 {
		t.Errorf("%d rows, want 2", n)
	}
	commits, writes := groupCounts(t)
	if commits-commits0 != 1 || writes-writes0 != 2 {
		t.Errorf("%v writes in %v commits, want 2 in 1", writes-writes0, commits-commits0)
	}
}

// TestGroupCommitLostTransaction: when the shared transaction is lost (here a
// writer ends it; SQLite does so itself after an I/O error or a full disk),
// every writer in it gets an error and none of their rows is there.
func TestGroupCommitLostTransaction(t *testing.T) {
	db, g := openGroupDB(t, time.Minute)
	lease := leasePrefix + "kube-node-lease/n"
	first := make(chan error, 1)
	go func() { _, err := db.Exec(groupInsert, 1, lease); first <- err }()
	waitMembers(t, g, 1)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(groupInsert, 2, lease); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err == nil {
		t.Error("commit after the shared transaction was lost succeeded")
	}
	if err := <-first; err == nil {
		t.Error("the first writer's commit succeeded though its transaction was lost")
	}
	if n := countRows(t, db); n != 0 {
		t.Errorf("%d rows, want none", n)
	}
	// The writer connection works on.
	if _, err := db.Exec(groupInsert, 3, "/registry/pods/default/p"); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}

// TestGroupCommitWaitEnds: a write whose context ends while it waits for the
// token is not written.
func TestGroupCommitWaitEnds(t *testing.T) {
	db, g := openGroupDB(t, 0)
	g.writes <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := db.ExecContext(ctx, groupInsert, 1, leasePrefix+"a")
	g.writes.give()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write: %v, want the context's deadline", err)
	}
	if n := countRows(t, db); n != 0 {
		t.Errorf("%d rows, want none", n)
	}
}

func TestLeaseWrite(t *testing.T) {
	for _, tc := range []struct {
		text string
		key  any
		want bool
	}{
		{"\n\t\tINSERT INTO kine(name, created)", "/registry/leases/kube-node-lease/n1", true},
		{"INSERT INTO kine(name)", "/registry/pods/default/p", false},
		{"INSERT INTO kine(name)", int64(3), false},
		{"DELETE FROM kine WHERE id = ?", "/registry/leases/x", false},
		{"PRAGMA wal_checkpoint(TRUNCATE)", nil, false},
	} {
		args := []driver.NamedValue{{Ordinal: 1, Value: int64(0)}, {Ordinal: 2, Value: tc.key}}
		if got := leaseWrite(tc.text, args); got != tc.want {
			t.Errorf("leaseWrite(%q, key %v) = %v, want %v", tc.text, tc.key, got, tc.want)
		}
	}
}
