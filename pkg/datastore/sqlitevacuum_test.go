package datastore

import (
	"bytes"
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWorthVacuum(t *testing.T) {
	const page = 1024
	for _, tc := range []struct {
		name        string
		pages, free int64
		want        bool
	}{
		{"no free pages", 16 << 10, 0, false},
		{"a little free space", 16 << 10, 1 << 10, false},
		{"much free space, but a small share", 200 << 10, 10 << 10, false},
		{"mostly free, but small", 4 << 10, 3 << 10, false},
		{"mostly free and large", 20 << 10, 10 << 10, true},
	} {
		if got := worthVacuum(tc.pages, tc.free, page); got != tc.want {
			t.Errorf("%s: worthVacuum(%d, %d, %d) = %v, want %v", tc.name, tc.pages, tc.free, page, got, tc.want)
		}
	}
}

// TestStartupVacuum: the check before kine rewrites a database whose pages
// are mostly free (it shrinks) and leaves a full one byte for byte as it was
// (kine's own startup VACUUM, which rewrote every database at every start,
// is off: sqliteParams).
func TestStartupVacuum(t *testing.T) {
	if !strings.Contains(sqliteParams, "_kine_disable_startup_vacuum") {
		t.Fatalf("kine's startup VACUUM is not turned off in %q", sqliteParams)
	}
	ctx := testContext(t)
	for _, tc := range []struct {
		name       string
		deleteRows bool
		wantShrink bool
	}{
		{name: "full database", deleteRows: false, wantShrink: false},
		{name: "mostly free pages", deleteRows: true, wantShrink: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), sqliteFile)
			fillSQLite(ctx, t, path, 12<<20, tc.deleteRows)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkSQLite(ctx, path); err != nil {
				t.Fatalf("checkSQLite: %v", err)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantShrink && len(after) > len(before)/4:
				t.Errorf("%d bytes after the check, was %d: not vacuumed", len(after), len(before))
			case !tc.wantShrink && !bytes.Equal(before, after):
				t.Errorf("the database was rewritten (%d -> %d bytes) though it had no free space to reclaim", len(before), len(after))
			}
		})
	}
}

// fillSQLite makes a WAL-mode database at path holding about size bytes of
// rows, deleted again when deleteRows is set, and closes it checkpointed.
func fillSQLite(ctx context.Context, t *testing.T, path string, size int, deleteRows bool) {
	t.Helper()
	dsn := (&url.URL{Scheme: "file", Path: path, RawQuery: "_pragma=journal_mode(WAL)"}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	row := bytes.Repeat([]byte("x"), 4000)
	stmts := []string{"CREATE TABLE t (v BLOB)", "BEGIN"}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < size/len(row); i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (?)", row); err != nil {
			t.Fatal(err)
		}
	}
	tail := []string{"COMMIT"}
	if deleteRows {
		tail = append(tail, "DELETE FROM t")
	}
	tail = append(tail, "PRAGMA wal_checkpoint(TRUNCATE)")
	for _, s := range tail {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
}
