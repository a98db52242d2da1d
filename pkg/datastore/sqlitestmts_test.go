package datastore

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sqlite3 "modernc.org/sqlite"
)

// openStmtCacheTest creates a real SQLite file with a plain handle, then
// opens it through the statement cache with one connection, so every call
// in a test runs on the same cache.
func openStmtCacheTest(t *testing.T, size int) *sql.DB {
	t.Helper()
	base, err := sqlite3.NewConnector("file://" + filepath.Join(t.TempDir(), "t.db") + "?" + sqliteParams)
	if err != nil {
		t.Fatal(err)
	}
	setup := sql.OpenDB(base)
	for _, q := range []string{
		`CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER)`,
		`INSERT INTO kv VALUES ('a', 1), ('b', 2), ('c', 3)`,
	} {
		if _, err := setup.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := setup.Close(); err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(newSQLiteConnector(base, size, 0))
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// cachedTexts is the SQL the connection keeps, most recently used first,
// then what the writer connection keeps of the writes (sqlitegroup.go), less
// the group's own transaction statements.
func cachedTexts(t *testing.T, db *sql.DB) []string {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var texts []string
	err = conn.Raw(func(dc any) error {
		w, ok := dc.(*writeSerialConn)
		if !ok {
			return errors.New("connection is not a writeSerialConn")
		}
		c, ok := w.sqliteConn.(*stmtCacheConn)
		if !ok {
			return errors.New("connection does not keep statements")
		}
		for el := c.lru.Front(); el != nil; el = el.Next() {
			texts = append(texts, el.Value.(*stmtEntry).text)
		}
		w.group.writes <- struct{}{}
		defer w.group.writes.give()
		if wc, ok := w.group.conn.(*stmtCacheConn); ok {
			for el := wc.lru.Front(); el != nil; el = el.Next() {
				text := el.Value.(*stmtEntry).text
				if !strings.HasPrefix(text, "BEGIN") && !strings.HasPrefix(text, "SAVEPOINT") &&
					!strings.HasPrefix(text, "RELEASE") && !strings.HasPrefix(text, "COMMIT") && !strings.HasPrefix(text, "ROLLBACK") {
					texts = append(texts, text)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return texts
}

func value(t *testing.T, q interface {
	QueryRow(string, ...any) *sql.Row
}, k string) int {
	t.Helper()
	var v int
	if err := q.QueryRow(`SELECT v FROM kv WHERE k = ?`, k).Scan(&v); err != nil {
		t.Fatalf("reading %s: %v", k, err)
	}
	return v
}

func TestStmtCache(t *testing.T) {
	const sel = `SELECT v FROM kv WHERE k = ?`
	tests := []struct {
		name string
		size int
		run  func(t *testing.T, db *sql.DB)
		kept []string // cached texts at the end, most recent first
	}{{
		name: "a statement runs again with new arguments",
		size: 8,
		run: func(t *testing.T, db *sql.DB) {
			for k, want := range map[string]int{"a": 1, "b": 2, "c": 3, "x": 0} {
				var v int
				err := db.QueryRow(sel, k).Scan(&v)
				if k == "x" {
					if !errors.Is(err, sql.ErrNoRows) {
						t.Errorf("missing key: err %v, want no rows", err)
					}
					continue
				}
				if err != nil || v != want {
					t.Errorf("%s: got %d, %v; want %d", k, v, err, want)
				}
			}
		},
		kept: []string{sel},
	}, {
		name: "writes reuse their statement, also after a failed run",
		size: 8,
		run: func(t *testing.T, db *sql.DB) {
			const ins = `INSERT INTO kv VALUES (?, ?)`
			if _, err := db.Exec(ins, "d", 4); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(ins, "d", 5); err == nil {
				t.Fatal("duplicate key stored")
			}
			if _, err := db.Exec(ins, "e", 5); err != nil {
				t.Fatalf("after a constraint failure: %v", err)
			}
			if value(t, db, "d") != 4 || value(t, db, "e") != 5 {
				t.Error("wrong values stored")
			}
		},
		kept: []string{sel, `INSERT INTO kv VALUES (?, ?)`},
	}, {
		name: "the same text while its rows are open runs a one-off statement",
		size: 8,
		run: func(t *testing.T, db *sql.DB) {
			tx, err := db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			rows, err := tx.Query(`SELECT k FROM kv ORDER BY k`)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					t.Fatal(err)
				}
				got = append(got, value(t, tx, k))
				if _, err := tx.Exec(`UPDATE kv SET v = v + 10 WHERE k = ?`, k); err != nil {
					t.Fatal(err)
				}
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
			if len(got) != 3 || got[0] != 1 || got[2] != 3 {
				t.Errorf("got %v, want [1 2 3]", got)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if value(t, db, "b") != 12 {
				t.Error("update lost")
			}
		},
		// The transaction ran on the writer connection, which keeps its
		// own statements (after the pool connection's sel).
		kept: []string{sel, `UPDATE kv SET v = v + 10 WHERE k = ?`, sel, `SELECT k FROM kv ORDER BY k`},
	}, {
		name: "least recently used statements are dropped, also while their rows are open",
		size: 2,
		run: func(t *testing.T, db *sql.DB) {
			conn, err := db.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rows, err := conn.QueryContext(context.Background(), `SELECT k FROM kv ORDER BY k`)
			if err != nil {
				t.Fatal(err)
			}
			// Two more texts push the open one out of a cache of two.
			for _, q := range []string{`SELECT count(*) FROM kv`, `SELECT max(v) FROM kv`} {
				var n int
				if err := conn.QueryRowContext(context.Background(), q).Scan(&n); err != nil || n != 3 {
					t.Errorf("%s: %d, %v", q, n, err)
				}
			}
			var keys []string
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			}
			if err := rows.Close(); err != nil || len(keys) != 3 {
				t.Errorf("rows of a dropped statement: %v, %v", keys, err)
			}
			if err := conn.Close(); err != nil {
				t.Fatal(err)
			}
			if value(t, db, "c") != 3 {
				t.Error("wrong value")
			}
		},
		kept: []string{sel, `SELECT max(v) FROM kv`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := openStmtCacheTest(t, tt.size)
			tt.run(t, db)
			got := cachedTexts(t, db)
			if len(got) != len(tt.kept) {
				t.Fatalf("kept %q, want %q", got, tt.kept)
			}
			for i := range got {
				if got[i] != tt.kept[i] {
					t.Errorf("kept %q, want %q", got, tt.kept)
				}
			}
		})
	}
}

// TestStmtCacheConcurrent runs reads and writes on many connections at once
// (go test -race covers the cache's bookkeeping).
func TestStmtCacheConcurrent(t *testing.T) {
	db := openStmtCacheTest(t, 4)
	db.SetMaxOpenConns(4)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				if _, err := db.Exec(`UPDATE kv SET v = v + 1 WHERE k = ?`, "a"); err != nil {
					t.Error(err)
					return
				}
				var v int
				if err := db.QueryRow(`SELECT v FROM kv WHERE k = ?`, []string{"a", "b", "c"}[(i+j)%3]).Scan(&v); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := value(t, db, "a"); got != 1+8*50 {
		t.Errorf("a = %d, want %d", got, 1+8*50)
	}
}
