package datastore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/server"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestCreateAfterDeleteRevision checks that re-creating a deleted key answers
// the revision the key was created at, with the API server's transactions
// (create-if-absent, delete-if-revision) and concurrent writers. kine v0.17.5
// answered its current revision instead (see kinefix.go).
func TestCreateAfterDeleteRevision(t *testing.T) {
	for _, typ := range []string{TypeSQLite, TypeEtcd} {
		t.Run(typ, func(t *testing.T) {
			ctx := testContext(t)
			ds := startReady(ctx, t, testOptions(t, typ, t.TempDir()))
			cli := testClient(ctx, t, ds.Client())
			inParallel(t, 4, func(w int) error {
				return recreateLoop(ctx, cli, fmt.Sprintf("/registry/configmaps/default/again-%d", w), 40)
			})
		})
	}
}

// inParallel runs f(0..n-1) at once and reports each error.
func inParallel(t *testing.T, n int, f func(w int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range n {
		wg.Go(func() { errs <- f(w) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// recreateLoop creates, checks and deletes key n times.
func recreateLoop(ctx context.Context, cli *clientv3.Client, key string, n int) error {
	for i := range n {
		value := fmt.Sprintf("v%d", i)
		txn, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, value)).Commit()
		if err != nil || !txn.Succeeded {
			return fmt.Errorf("create %s %s: succeeded=%v err=%v", key, value, txn != nil && txn.Succeeded, err)
		}
		rev := txn.Header.Revision
		get, err := cli.Get(ctx, key)
		if err != nil || len(get.Kvs) != 1 {
			return fmt.Errorf("get %s: %v, %v", key, get, err)
		}
		if kv := get.Kvs[0]; string(kv.Value) != value || kv.ModRevision != rev || kv.CreateRevision != rev {
			return fmt.Errorf("create %d of %s answered revision %d; the key holds %q created at %d, modified at %d",
				i, key, rev, kv.Value, kv.CreateRevision, kv.ModRevision)
		}
		del, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil || !del.Succeeded {
			return fmt.Errorf("delete %s at revision %d: succeeded=%v err=%v", key, rev, del != nil && del.Succeeded, err)
		}
	}
	return nil
}

// TestCreateRevisionFixModes drives both ways the fix learns a create's
// revision, on kine and a real SQLite file: the recorded appends (SQLite)
// and the read-back (what PostgreSQL uses), through kine's backend API.
func TestCreateRevisionFixModes(t *testing.T) {
	for _, recorded := range []bool{true, false} {
		t.Run(fmt.Sprintf("recorded=%v", recorded), func(t *testing.T) {
			ctx, b := startSQLiteBackend(t)
			b.recorded = recorded
			// Writers on other keys move the revision on between the
			// insert and kine's answer, which is when kine answered wrong.
			inParallel(t, 4, func(w int) error {
				return recreateBackend(ctx, b, fmt.Sprintf("/registry/configmaps/default/fix-%d", w), 30)
			})
		})
	}
}

// startSQLiteBackend starts kine's backend as edgeplane assembles it, on a
// new SQLite file; it stops with the test.
func startSQLiteBackend(t *testing.T) (context.Context, createRevisionFix) {
	t.Helper()
	return startSQLiteBackendWindow(t, 0)
}

// startSQLiteBackendWindow is startSQLiteBackend with a commit window for
// Lease writes (sqlitegroup.go).
func startSQLiteBackendWindow(t *testing.T, window time.Duration) (context.Context, createRevisionFix) {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	cfg := drivers.Config{
		Endpoint:         "sqlite://" + filepath.Join(t.TempDir(), sqliteFile) + "?" + sqliteParams,
		CompactTimeout:   5 * time.Second,
		CompactMinRetain: 1000,
		CompactBatchSize: 1000,
		PollBatchSize:    500,
		PollInterval:     time.Second,
	}
	b, err := newKineBackend(ctx, &wg, &cfg, window)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx, b
}

// recreateBackend creates, checks and deletes key n times through b.
func recreateBackend(ctx context.Context, b createRevisionFix, key string, n int) error {
	for i := range n {
		value := []byte(fmt.Sprintf("v%d", i))
		rev, stored, err := b.createVerified(ctx, key, value, 0)
		if err != nil || !stored {
			return fmt.Errorf("create %d of %s: rev %d, stored %v, %v", i, key, rev, stored, err)
		}
		_, kv, err := b.Get(ctx, key, 0, false)
		if err != nil || kv == nil || kv.ModRevision != rev || kv.CreateRevision != rev || string(kv.Value) != string(value) {
			return fmt.Errorf("create %d of %s answered revision %d; the key reads %+v, %v", i, key, rev, kv, err)
		}
		exists, err := b.Create(ctx, key, value, 0)
		if !errors.Is(err, server.ErrKeyExists) {
			return fmt.Errorf("create of live %s: %v, want ErrKeyExists", key, err)
		}
		// kine's Put reads the key at the revision a refused create
		// answers, and takes it as there (a nil key panics it).
		if _, kv, err := b.Get(ctx, key, exists, false); err != nil || kv == nil || kv.ModRevision != rev {
			return fmt.Errorf("create of live %s (modified at %d) answered revision %d, where the key reads %+v, %v", key, rev, exists, kv, err)
		}
		if _, _, deleted, err := b.Delete(ctx, key, rev); err != nil || !deleted {
			return fmt.Errorf("delete %d of %s at %d: %v, %v", i, key, rev, deleted, err)
		}
	}
	return nil
}
