package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/edgeplane/edgeplane/pkg/rawstore"
)

// Save writes a snapshot of store into dir as <name>-<kind>-<time>.db (0600)
// and returns its path. It never replaces an existing file, and a failure
// leaves no partial file behind.
func Save(ctx context.Context, store *rawstore.Store, dir, name string, now time.Time) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	path := filepath.Join(dir, fileName(name, store.Kind, now))
	tmp := filepath.Join(dir, "."+filepath.Base(path)+".partial")
	_ = os.Remove(tmp) // left by a crash
	var err error
	switch store.Kind {
	case rawstore.SQLite:
		err = saveSQLite(ctx, store, tmp)
	case rawstore.Etcd:
		err = saveEtcd(ctx, store, tmp)
	default:
		err = fmt.Errorf("snapshot: unknown datastore %q", store.Kind)
	}
	if err == nil {
		err = syncFile(tmp)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return path, publish(tmp, path)
}

// saveSQLite copies the database with VACUUM INTO: one read transaction, so
// the copy is consistent while kine keeps writing, and compact.
func saveSQLite(ctx context.Context, store *rawstore.Store, dst string) error {
	if _, err := store.DB().ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		return fmt.Errorf("snapshot: VACUUM INTO %s: %w", dst, err)
	}
	return nil
}

// saveEtcd streams etcd's snapshot (a bbolt file with a SHA-256 appended).
func saveEtcd(ctx context.Context, store *rawstore.Store, dst string) (rerr error) {
	rc, err := store.EtcdClient().Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("snapshot: etcd: %w", err)
	}
	defer rc.Close()
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer func() { rerr = errors.Join(rerr, f.Close()) }()
	n, err := io.Copy(f, rc)
	if err != nil {
		return fmt.Errorf("snapshot: etcd: receiving: %w", err)
	}
	// bbolt pages are multiples of 512 bytes; etcd appends a 32-byte hash.
	if n%512 != 32 {
		return fmt.Errorf("snapshot: etcd sent %d bytes, not a whole snapshot", n)
	}
	return nil
}
