package datastore

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

// TestSQLitePageSize: a fresh install gets sqlitePageSize pages in WAL mode,
// a 0600 file and no leftover temp file; a database made before keeps its
// page size and its data.
func TestSQLitePageSize(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing int // page size of a database made before start; 0: none
		want     int
	}{
		{name: "fresh install", want: sqlitePageSize},
		{name: "database from before, 4096-byte pages", existing: 4096, want: 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			dataDir := t.TempDir()
			dbDir := filepath.Join(dataDir, "db")
			dbPath := filepath.Join(dbDir, sqliteFile)
			if tc.existing != 0 {
				if err := os.MkdirAll(dbDir, 0o700); err != nil {
					t.Fatal(err)
				}
				db := openTestSQLite(t, dbPath, "")
				for _, q := range []string{fmt.Sprintf("PRAGMA page_size = %d", tc.existing), "PRAGMA journal_mode = WAL", "CREATE TABLE before (x)"} {
					if _, err := db.Exec(q); err != nil {
						t.Fatal(err)
					}
				}
				db.Close()
			}
			ds := startReady(ctx, t, Options{DataDir: dataDir})
			cli := testClient(ctx, t, ds.Client())
			if _, err := cli.Put(ctx, "/registry/leases/kube-node-lease/edge-1", "renewed"); err != nil {
				t.Fatal(err)
			}
			if err := ds.Stop(ctx); err != nil {
				t.Fatal(err)
			}

			if tc.existing == 0 {
				checkMode(t, dbPath, 0o600)
			}
			if left, _ := filepath.Glob(filepath.Join(dbDir, ".*new*")); len(left) > 0 {
				t.Errorf("temp files left: %v", left)
			}
			db := openTestSQLite(t, dbPath, "mode=ro")
			defer db.Close()
			var size int
			var mode string
			var rows int
			if err := db.QueryRow("PRAGMA page_size").Scan(&size); err != nil {
				t.Fatal(err)
			}
			if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
				t.Fatal(err)
			}
			if err := db.QueryRow("SELECT count(*) FROM kine WHERE name = '/registry/leases/kube-node-lease/edge-1'").Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if size != tc.want || mode != "wal" || rows != 1 {
				t.Errorf("page_size %d, journal_mode %q, %d rows of the key; want %d, wal, 1", size, mode, rows, tc.want)
			}
		})
	}
}

// TestDriverSortsPragmas is the canary of why createSQLite exists:
// modernc.org/sqlite runs a DSN's _pragma values sorted by name, so a page
// size given next to journal_mode(WAL) comes too late to count. When this
// fails, the driver honours the given order (or page_size first): the page
// size can then go in sqliteParams and createSQLite can go.
func TestDriverSortsPragmas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sorted.db")
	db := openTestSQLite(t, path, "_pragma=page_size(1024)&_pragma=journal_mode(WAL)")
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE x (y)"); err != nil {
		t.Fatal(err)
	}
	var size int
	if err := db.QueryRow("PRAGMA page_size").Scan(&size); err != nil {
		t.Fatal(err)
	}
	if size == 1024 {
		t.Fatal("the driver applied page_size(1024) before journal_mode(WAL): it no longer sorts the pragmas; move the page size into sqliteParams and delete createSQLite")
	}
}

func openTestSQLite(t *testing.T, path, query string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path, RawQuery: query}).String())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}
