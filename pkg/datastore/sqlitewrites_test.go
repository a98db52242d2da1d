package datastore

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	sqlite3 "modernc.org/sqlite"
)

// TestWriteSerialConn runs concurrent write transactions and autocommit
// writes on a database without a busy timeout: SQLite refuses a writer that
// finds the write lock taken at once ("database is locked"), so any two
// writers that overlapped would fail.
func TestWriteSerialConn(t *testing.T) {
	base, err := sqlite3.NewConnector("file://" + filepath.Join(t.TempDir(), "w.db") +
		"?_pragma=busy_timeout(0)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(newSQLiteConnector(base, stmtCacheSize, 0))
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE n (w INTEGER, i INTEGER)`); err != nil {
		t.Fatal(err)
	}

	const writers, writes = 8, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range writes {
				if i%2 == 0 {
					if _, err := db.Exec(`INSERT INTO n VALUES (?, ?)`, w, i); err != nil {
						t.Errorf("writer %d, autocommit %d: %v", w, i, err)
						return
					}
					continue
				}
				tx, err := db.BeginTx(context.Background(), nil)
				if err != nil {
					t.Errorf("writer %d, begin %d: %v", w, i, err)
					return
				}
				var n int
				if err := tx.QueryRow(`SELECT count(*) FROM n WHERE w = ?`, w).Scan(&n); err != nil || n != i {
					t.Errorf("writer %d sees %d of its rows before write %d (%v)", w, n, i, err)
				}
				if _, err := tx.Exec(`INSERT INTO n VALUES (?, ?)`, w, i); err != nil {
					t.Errorf("writer %d, insert %d: %v", w, i, err)
				}
				if err := tx.Commit(); err != nil {
					t.Errorf("writer %d, commit %d: %v", w, i, err)
				}
			}
		})
	}
	// Readers run beside the writers without waiting for them.
	for range 4 {
		wg.Go(func() {
			for range writes {
				var n int
				if err := db.QueryRow(`SELECT count(*) FROM n`).Scan(&n); err != nil {
					t.Errorf("reader: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM n`).Scan(&n); err != nil || n != writers*writes {
		t.Fatalf("%d rows (%v), want %d", n, err, writers*writes)
	}
}

// TestWriteSerialConnWaitEnds checks that a writer waiting behind an open
// transaction gives up when its context ends, and that the token is free
// again after the transaction ends, whether it commits or rolls back.
func TestWriteSerialConnWaitEnds(t *testing.T) {
	base, err := sqlite3.NewConnector("file://" + filepath.Join(t.TempDir(), "w.db") + "?" + sqliteParams)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(newSQLiteConnector(base, stmtCacheSize, 0))
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE n (i INTEGER)`); err != nil {
		t.Fatal(err)
	}
	for _, end := range []string{"commit", "rollback", "context"} {
		t.Run(end, func(t *testing.T) {
			txCtx, cancelTx := context.WithCancel(context.Background())
			defer cancelTx()
			tx, err := db.BeginTx(txCtx, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if _, err := db.ExecContext(ctx, `INSERT INTO n VALUES (1)`); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("write behind an open transaction: %v, want the deadline", err)
			}
			switch end {
			case "commit":
				err = tx.Commit()
			case "rollback":
				err = tx.Rollback()
			case "context":
				cancelTx()
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel2()
			if _, err := db.ExecContext(ctx2, `INSERT INTO n VALUES (2)`); err != nil {
				t.Fatalf("write after the transaction's %s: %v", end, err)
			}
		})
	}
}
