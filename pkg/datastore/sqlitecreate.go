package datastore

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

// sqlitePageSize is the page size of a database edgeplane creates. A commit
// appends every page it changed to the WAL, and the checkpoint writes them
// again into the database file: an idle node's Lease renewal (every 10 s)
// changes the kine table's last leaf, the sequence row and a leaf of each
// of kine's six indexes, so at SQLite's default of 4096 bytes it costs
// about 53 KB on disk and at 1024 about 24 KB (docs/PERFORMANCE.md, "What
// a node costs"). Rows bigger than a page go on overflow pages, which
// costs nothing on the small objects the idle writes are made of.
const sqlitePageSize = 1024

// createSQLite makes the empty database file for a fresh install with
// sqlitePageSize pages, already in WAL mode, durably (a temp file in the
// same directory, renamed into place, the directory synced). The page size
// of a database is fixed by its first write, and it cannot be put in
// kine's DSN: the driver runs the DSN's _pragma values sorted by name,
// so journal_mode(WAL) would run first and fix the default size
// (TestDriverSortsPragmas). An existing database keeps its page size.
func createSQLite(ctx context.Context, path string) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".new-*")
	if err != nil {
		return fmt.Errorf("datastore: creating %s: %w", path, err)
	}
	tmp := f.Name()
	f.Close()
	defer os.Remove(tmp) // after the rename, there is nothing left to remove
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fmt.Errorf("datastore: creating %s: %w", path, err)
	}

	dsn := (&url.URL{Scheme: "file", Path: tmp, RawQuery: "mode=rw"}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fmt.Errorf("datastore: creating %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	for _, stmt := range []string{
		fmt.Sprintf("PRAGMA page_size = %d", sqlitePageSize),
		"PRAGMA journal_mode = WAL",
		// The first table writes page 1 with the page size; kine's own
		// schema follows when it opens the file.
		"CREATE TABLE edgeplane_created (at INTEGER)",
		"DROP TABLE edgeplane_created",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			db.Close()
			return fmt.Errorf("datastore: creating %s (%s): %w", path, stmt, err)
		}
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("datastore: creating %s: %w", path, err)
	}
	if err := atomicfile.Sync(tmp); err != nil {
		return fmt.Errorf("datastore: creating %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("datastore: creating %s: %w", path, err)
	}
	if err := atomicfile.Sync(dir); err != nil {
		return fmt.Errorf("datastore: creating %s: %w", path, err)
	}
	return nil
}
