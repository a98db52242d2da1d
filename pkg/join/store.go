package join

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BootstrapKey is the datastore key that holds the sealed bootstrap data.
const BootstrapKey = "/edgeplane/bootstrap"

// Load returns the sealed bootstrap data in the datastore, or nil when none
// was published yet.
func Load(ctx context.Context, kv clientv3.KV) ([]byte, error) {
	resp, err := kv.Get(ctx, BootstrapKey)
	if err != nil {
		return nil, fmt.Errorf("reading the bootstrap data from the datastore: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

// Publish stores blob unless bootstrap data already exists. It returns the
// data that is now in the datastore: blob when it won, the other server's
// otherwise. The transaction has the create-only shape kine supports.
func Publish(ctx context.Context, kv clientv3.KV, blob []byte) (stored []byte, won bool, err error) {
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(BootstrapKey), "=", 0)).
		Then(clientv3.OpPut(BootstrapKey, string(blob))).
		Commit()
	if err != nil {
		return nil, false, fmt.Errorf("writing the bootstrap data to the datastore: %w", err)
	}
	if resp.Succeeded {
		return blob, true, nil
	}
	stored, err = Load(ctx, kv)
	return stored, false, err
}
