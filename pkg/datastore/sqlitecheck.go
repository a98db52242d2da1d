package datastore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// checkSQLite runs PRAGMA quick_check on an existing database file before kine
// gets it. kine would otherwise retry a corrupt file for minutes ("Failed to
// ping database connection") instead of failing. The file is opened
// read-write (so a hot WAL is recovered as usual) but never created: a
// missing file is a fresh install, which gets a new empty database with
// edgeplane's page size (createSQLite).
func checkSQLite(ctx context.Context, path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return createSQLite(ctx, path)
	} else if err != nil {
		return fmt.Errorf("datastore: %w", err)
	}

	dsn := (&url.URL{Scheme: "file", Path: path, RawQuery: "mode=rw&_pragma=busy_timeout(30000)"}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fmt.Errorf("datastore: opening %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)

	rows, err := db.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		return sqliteCheckErr(path, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return sqliteCheckErr(path, err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return sqliteCheckErr(path, err)
	}
	if len(problems) > 0 {
		const maxShown = 3
		if len(problems) > maxShown {
			problems = append(problems[:maxShown], fmt.Sprintf("and %d more", len(problems)-maxShown))
		}
		return invalidSQLite(path, "quick_check: "+strings.Join(problems, "; "))
	}
	startupVacuum(ctx, db, path)
	return nil
}

// A database is rewritten at start (VACUUM) only when at least
// vacuumMinFree bytes and a quarter of its pages are free: compaction
// deletes rows, SQLite reuses the pages they leave, and the file only
// shrinks with a VACUUM, which writes the whole database twice.
const vacuumMinFree = 8 << 20

func worthVacuum(pages, free, pageSize int64) bool {
	return free*pageSize >= vacuumMinFree && free*4 >= pages
}

// startupVacuum reclaims a mostly free database's space; a failure only
// leaves the file as large as it was.
func startupVacuum(ctx context.Context, db *sql.DB, path string) {
	logger := klog.FromContext(ctx)
	var pages, free, pageSize int64
	err := db.QueryRowContext(ctx, "SELECT page_count, freelist_count, page_size FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()").Scan(&pages, &free, &pageSize)
	if err != nil {
		logger.Info("Not checking the database's free space", "database", path, "err", err)
		return
	}
	if !worthVacuum(pages, free, pageSize) {
		return
	}
	start := time.Now()
	if _, err := db.ExecContext(ctx, "VACUUM"); err != nil {
		logger.Info("Could not reclaim the database's free space (VACUUM)", "database", path, "err", err)
		return
	}
	logger.Info("Reclaimed the database's free space (VACUUM)", "database", path,
		"before", pages*pageSize, "freed", free*pageSize, "took", time.Since(start).Round(time.Millisecond))
}

// sqliteCheckErr tells corruption apart from I/O, permission or lock errors.
func sqliteCheckErr(path string, err error) error {
	var serr *sqlite.Error
	if errors.As(err, &serr) {
		switch serr.Code() & 0xff {
		case sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT:
			return invalidSQLite(path, err.Error())
		}
	}
	return fmt.Errorf("datastore: checking %s: %w", path, err)
}

func invalidSQLite(path, detail string) error {
	return fmt.Errorf("datastore: %s is not a valid SQLite database (%s): restore it from a snapshot or move it aside", path, detail)
}
