package snapshot

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"time"

	etcdsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/rawstore"
)

// RestoreOptions configures Restore.
type RestoreOptions struct {
	// File is the snapshot; its kind (SQLite or etcd) is read from it.
	File string
	// DataDir receives it. The caller holds the data dir lock: no server
	// may run on it.
	DataDir string
	// EtcdName is the embedded etcd member's name (the host name).
	EtcdName string
	Now      func() time.Time
}

// Restore replaces the datastore of a data dir with a snapshot and returns
// the kind restored. The datastore it replaces is kept beside it, renamed
// with a ".pre-restore-<time>" suffix.
func Restore(ctx context.Context, o RestoreOptions) (string, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	kind, err := DetectKind(o.File)
	if err != nil {
		return "", err
	}
	suffix := ".pre-restore-" + o.Now().UTC().Format(timestampFormat)
	if err := os.MkdirAll(filepath.Join(o.DataDir, "db"), dirMode); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	switch kind {
	case rawstore.SQLite:
		return kind, restoreSQLite(ctx, o.File, rawstore.SQLitePath(o.DataDir), suffix)
	default:
		return kind, restoreEtcd(ctx, o.File, rawstore.EtcdDir(o.DataDir), o.EtcdName, suffix)
	}
}

// restoreSQLite checks the snapshot, copies it next to the database, moves
// the database (with its -wal and -shm files) aside and renames the copy in.
func restoreSQLite(ctx context.Context, src, dbPath, suffix string) error {
	if err := checkSQLite(ctx, src); err != nil {
		return err
	}
	tmp := dbPath + ".restoring"
	if err := copyFile(src, tmp); err != nil {
		return err
	}
	for _, ext := range []string{"", "-wal", "-shm"} {
		err := os.Rename(dbPath+ext, dbPath+suffix+ext)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(tmp)
			return fmt.Errorf("snapshot: moving the current database aside: %w", err)
		}
	}
	if err := os.Rename(tmp, dbPath); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return syncDir(filepath.Dir(dbPath))
}

// checkSQLite runs PRAGMA quick_check on the snapshot, read-only, and makes
// sure it holds kine's table.
func checkSQLite(ctx context.Context, path string) error {
	dsn := (&url.URL{Scheme: "file", Path: path, RawQuery: "mode=ro&immutable=1"}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fmt.Errorf("snapshot: %s: %w", path, err)
	}
	defer db.Close()
	var res string
	if err := db.QueryRowContext(ctx, "PRAGMA quick_check").Scan(&res); err != nil {
		return fmt.Errorf("snapshot: %s is not a usable SQLite database: %w", path, err)
	}
	if res != "ok" {
		return fmt.Errorf("snapshot: %s is damaged: %s", path, res)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kine").Scan(&n); err != nil {
		return fmt.Errorf("snapshot: %s is a SQLite database but no edgeplane (kine) snapshot: %w", path, err)
	}
	return nil
}

// restoreEtcd moves the etcd data dir aside and lets etcdutl build a new
// single-member one from the snapshot. Revisions are bumped and marked
// compacted, as etcd advises for Kubernetes: clients that saw newer
// revisions than the snapshot's then relist instead of missing changes.
func restoreEtcd(ctx context.Context, src, etcdDir, name, suffix string) error {
	if name == "" {
		return errors.New("snapshot: no etcd member name")
	}
	if err := os.Rename(etcdDir, etcdDir+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("snapshot: moving the current etcd data aside: %w", err)
	}
	// Peer URLs are stored in the member list; the embedded etcd is one
	// member on loopback and picks its ports at each start.
	peer := "https://127.0.0.1:2380"
	err := etcdsnapshot.NewV3(zapFor(ctx)).Restore(etcdsnapshot.RestoreConfig{
		SnapshotPath:        src,
		Name:                name,
		OutputDataDir:       etcdDir,
		PeerURLs:            []string{peer},
		InitialCluster:      name + "=" + peer,
		InitialClusterToken: "etcd-cluster", // embed's default
		RevisionBump:        1_000_000_000,
		MarkCompacted:       true,
	})
	if err != nil {
		_ = os.RemoveAll(etcdDir)
		if rerr := os.Rename(etcdDir+suffix, etcdDir); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("snapshot: etcd restore: %w", err)
	}
	if err := os.Chmod(etcdDir, dirMode); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	// etcdutl syncs what it writes; the renames in db/ need the directory's.
	return syncDir(filepath.Dir(etcdDir))
}

// zapFor gives etcdutl a quiet logger unless klog is verbose.
func zapFor(ctx context.Context) *zap.Logger {
	if klog.FromContext(ctx).V(2).Enabled() {
		if lg, err := zap.NewDevelopment(); err == nil {
			return lg
		}
	}
	return zap.NewNop()
}

func copyFile(src, dst string) (rerr error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fileMode)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer func() {
		if cerr := out.Close(); rerr == nil && cerr != nil {
			rerr = fmt.Errorf("snapshot: %w", cerr)
		}
		if rerr != nil {
			_ = os.Remove(dst)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("snapshot: copying %s: %w", src, err)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}
