package datastore

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSQLiteFiles(t *testing.T) {
	ctx := testContext(t)
	dataDir := t.TempDir()
	ds := startReady(ctx, t, Options{DataDir: dataDir})
	dbDir := filepath.Join(dataDir, "db")

	if got := ds.Client(); len(got.Endpoints) != 1 || got.Endpoints[0] != "unix://"+filepath.Join(dbDir, kineSocket) || got.CAFile != "" {
		t.Errorf("Client() = %+v", got)
	}
	checkMode(t, dbDir, 0o700)
	checkMode(t, filepath.Join(dbDir, kineSocket), 0o600)
	for _, f := range []string{sqliteFile, sqliteFile + "-wal"} {
		if _, err := os.Stat(filepath.Join(dbDir, f)); err != nil {
			t.Errorf("while running: %v", err)
		}
	}

	if err := ds.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dbDir, kineSocket)); !os.IsNotExist(err) {
		t.Errorf("socket after Stop: %v, want it removed", err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dbDir, sqliteFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Error(err)
		return
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %o, want %o", path, got, want)
	}
}

func TestSQLiteSocketPath(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, sock string)
		wantErr string // empty: Start and Ready succeed
	}{
		{name: "stale socket from a crash", prepare: func(t *testing.T, sock string) {
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			l.SetUnlinkOnClose(false)
			l.Close()
		}},
		{name: "live socket of another process", prepare: func(t *testing.T, sock string) {
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}, wantErr: "in use by another process"},
		{name: "regular file", prepare: func(t *testing.T, sock string) {
			if err := os.WriteFile(sock, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "is not a socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			dataDir := t.TempDir()
			sock := filepath.Join(dataDir, "db", kineSocket)
			if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
				t.Fatal(err)
			}
			tt.prepare(t, sock)

			if tt.wantErr == "" {
				startReady(ctx, t, Options{DataDir: dataDir})
				return
			}
			ds, err := New(Options{DataDir: dataDir})
			if err != nil {
				t.Fatal(err)
			}
			err = ds.Start(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Start error = %v, want it to contain %q", err, tt.wantErr)
			}
			if _, err := os.Lstat(sock); err != nil {
				t.Errorf("Start removed %s: %v", sock, err)
			}
			if err := ds.Stop(ctx); err != nil {
				t.Errorf("Stop after failed Start: %v", err)
			}
		})
	}
}

func TestSQLiteCorrupt(t *testing.T) {
	tests := []struct {
		name  string
		write func(t *testing.T, path string)
	}{
		{name: "random bytes", write: func(t *testing.T, path string) {
			b := make([]byte, 64<<10)
			if _, err := rand.Read(b); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "damaged table page", write: func(t *testing.T, path string) {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			for _, stmt := range []string{
				"CREATE TABLE kine (id INTEGER PRIMARY KEY, name TEXT, value BLOB)",
				"CREATE INDEX kine_name ON kine (name)",
				"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2000) " +
					"INSERT INTO kine (name, value) SELECT 'key-' || i, randomblob(100) FROM n",
			} {
				if _, err := db.Exec(stmt); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			const page = 4096 // SQLite's default page size
			if len(b) < 8*page {
				t.Fatalf("test database too small: %d bytes", len(b))
			}
			// Keep the header page intact, smash pages 3 to 5.
			copy(b[2*page:5*page], bytes.Repeat([]byte{0xA5}, 3*page))
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			dataDir := t.TempDir()
			dbDir := filepath.Join(dataDir, "db")
			if err := os.MkdirAll(dbDir, 0o700); err != nil {
				t.Fatal(err)
			}
			dbPath := filepath.Join(dbDir, sqliteFile)
			tt.write(t, dbPath)
			before, err := os.ReadFile(dbPath)
			if err != nil {
				t.Fatal(err)
			}

			ds, err := New(Options{DataDir: dataDir})
			if err != nil {
				t.Fatal(err)
			}
			// Start fails fast; if it did not, Ready must fail within the deadline.
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			err = ds.Start(rctx)
			if err == nil {
				err = ds.Ready(rctx)
			}
			if err == nil {
				t.Fatal("corrupt database accepted")
			}
			t.Logf("error: %v", err)
			for _, want := range []string{dbPath + " is not a valid SQLite database (", "): restore it from a snapshot or move it aside"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if err := ds.Stop(ctx); err != nil {
				t.Errorf("Stop: %v", err)
			}
			after, err := os.ReadFile(dbPath)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Error("database file was modified")
			}
		})
	}
}
