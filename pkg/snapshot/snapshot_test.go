package snapshot

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/pkg/rawstore"
)

var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// kineDB makes <dataDir>/db/state.db with kine's table and the given rows.
func kineDB(t *testing.T, dataDir string, names ...string) {
	t.Helper()
	path := rawstore.SQLitePath(dataDir)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS kine (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, created INTEGER,
		deleted INTEGER, create_revision INTEGER, prev_revision INTEGER, lease INTEGER, value BLOB, old_value BLOB)`); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := db.Exec(`INSERT INTO kine (name, created, deleted, create_revision, prev_revision, lease, value, old_value)
			VALUES (?, 1, 0, 0, 0, 0, ?, NULL)`, n, "value of "+n); err != nil {
			t.Fatal(err)
		}
	}
}

func keys(t *testing.T, ctx context.Context, dataDir string) []string {
	t.Helper()
	s, err := rawstore.Open(ctx, rawstore.Options{DataDir: dataDir, Kind: rawstore.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	kvs, err := s.List(ctx, "/registry/")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range kvs {
		out = append(out, kv.Key)
	}
	return out
}

func TestSQLiteSaveRestore(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	kineDB(t, dir, "/registry/a", "/registry/b")
	store, err := rawstore.Open(ctx, rawstore.Options{DataDir: dir, Kind: rawstore.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	path, err := Save(ctx, store, Dir(dir), OnDemandName, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Save(ctx, store, Dir(dir), OnDemandName, base); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second save at the same second: %v, want 'already exists'", err)
	}
	store.Close(ctx)
	if want := filepath.Join(dir, "snapshots", "on-demand-sqlite-20260301T120000Z.db"); path != want {
		t.Errorf("path %s, want %s", path, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v, %v", fi, err)
	}
	if kind, err := DetectKind(path); err != nil || kind != rawstore.SQLite {
		t.Fatalf("DetectKind = %q, %v", kind, err)
	}

	kineDB(t, dir, "/registry/c") // written after the snapshot
	kind, err := Restore(ctx, RestoreOptions{File: path, DataDir: dir, Now: func() time.Time { return base.Add(time.Hour) }})
	if err != nil || kind != rawstore.SQLite {
		t.Fatalf("Restore = %q, %v", kind, err)
	}
	if got := keys(t, ctx, dir); !slices.Equal(got, []string{"/registry/a", "/registry/b"}) {
		t.Errorf("after restore: %v", got)
	}
	if _, err := os.Stat(rawstore.SQLitePath(dir) + ".pre-restore-20260301T130000Z"); err != nil {
		t.Errorf("replaced database not kept: %v", err)
	}
}

func TestRestoreRefusesBadFiles(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a snapshot ", 10)), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.db")
	db, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE t (x)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for file, want := range map[string]string{
		junk:  "neither a SQLite database nor an etcd snapshot",
		other: "no edgeplane (kine) snapshot",
	} {
		if _, err := Restore(ctx, RestoreOptions{File: file, DataDir: dir}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Restore(%s) = %v, want %q", filepath.Base(file), err, want)
		}
	}
	if _, err := os.Stat(rawstore.SQLitePath(dir)); !os.IsNotExist(err) {
		t.Errorf("a refused restore created the database: %v", err)
	}
}

func TestListAndPrune(t *testing.T) {
	dir := t.TempDir()
	touch := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		touch(fileName(ScheduledName, "sqlite", base.Add(time.Duration(i)*time.Hour)))
	}
	touch(fileName(OnDemandName, "etcd", base.Add(-time.Hour)))
	touch("notes.txt")
	touch(".scheduled-sqlite-20260301T120000Z.db.partial")
	files, err := List(dir)
	if err != nil || len(files) != 5 {
		t.Fatalf("List = %v, %v", files, err)
	}
	if files[0].Name != OnDemandName || files[0].Kind != "etcd" || !files[0].Time.Equal(base.Add(-time.Hour)) {
		t.Errorf("oldest = %+v", files[0])
	}
	removed, err := Prune(dir, ScheduledName, 2)
	if err != nil || len(removed) != 2 {
		t.Fatalf("Prune = %v, %v", removed, err)
	}
	files, _ = List(dir)
	var left []string
	for _, f := range files {
		left = append(left, filepath.Base(f.Path))
	}
	want := []string{"on-demand-etcd-20260301T110000Z.db", "scheduled-sqlite-20260301T140000Z.db", "scheduled-sqlite-20260301T150000Z.db"}
	if !slices.Equal(left, want) {
		t.Errorf("after prune %v, want %v", left, want)
	}
}

func TestValidation(t *testing.T) {
	for _, tc := range []struct {
		schedule  string
		retention int
		name      string
		ok        bool
	}{
		{DefaultSchedule, 5, "on-demand", true},
		{"@every 6h", 1, "nightly-2", true},
		{"61 * * * *", 5, "x", false},
		{"@every 6h", 0, "x", false},
		{"@every 6h", 1, "Bad_Name", false},
	} {
		_, err := NewScheduler(SchedulerOptions{Schedule: tc.schedule, Retention: tc.retention})
		if err == nil {
			err = ValidateName(tc.name)
		}
		if (err == nil) != tc.ok {
			t.Errorf("%q/%d/%q: err %v, want ok=%v", tc.schedule, tc.retention, tc.name, err, tc.ok)
		}
	}
}

func TestSchedulerRunOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	kineDB(t, dir, "/registry/a")
	now := base
	s, err := NewScheduler(SchedulerOptions{
		Schedule: "@every 1h", Retention: 1, Dir: Dir(dir),
		Open: func(ctx context.Context) (*rawstore.Store, error) {
			return rawstore.Open(ctx, rawstore.Options{DataDir: dir, Kind: rawstore.SQLite})
		},
		Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	s.RunOnce(ctx)
	first, _ := List(Dir(dir))
	now = base.Add(time.Hour) // retention 1: the next run prunes the first
	s.RunOnce(ctx)
	files, _ := List(Dir(dir))
	if len(first) != 1 || len(files) != 1 || files[0].Path == first[0].Path {
		t.Errorf("runs kept %v then %v, want one newer file", first, files)
	}
}
