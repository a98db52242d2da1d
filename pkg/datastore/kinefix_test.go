package datastore

import (
	"context"
	"fmt"
	"sync"
	"testing"

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
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for w := range 4 {
				wg.Go(func() { errs <- recreateLoop(ctx, cli, fmt.Sprintf("/registry/configmaps/default/again-%d", w), 40) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
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
