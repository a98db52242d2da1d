package join

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BootstrapKey is the datastore key that holds the sealed bootstrap data.
const BootstrapKey = "/edgeplane/bootstrap"

// KubeletServingCAKey holds the cluster's kubelet-serving CA (the
// KubeletServingCAFiles of Data, sealed like the bootstrap data), which
// every server of a cluster must share, including the servers of a cluster
// whose bootstrap data predates it.
const KubeletServingCAKey = "/edgeplane/kubelet-serving-ca"

// KubeletServingCAFiles are the kubelet-serving CA's files in Data.
var KubeletServingCAFiles = []string{"tls/kubelet-serving-ca.crt", "tls/kubelet-serving-ca.key"}

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
	return createOrGet(ctx, kv, BootstrapKey, "the bootstrap data", blob)
}

// PublishKubeletServingCA stores blob, the sealed kubelet-serving CA, unless
// one is stored already; it returns what is stored now and whether it was
// blob.
func PublishKubeletServingCA(ctx context.Context, kv clientv3.KV, blob []byte) (stored []byte, won bool, err error) {
	return createOrGet(ctx, kv, KubeletServingCAKey, "the kubelet-serving CA", blob)
}

// createOrGet stores value at key unless key exists, with the create-only
// transaction shape kine supports, and returns the value stored now.
func createOrGet(ctx context.Context, kv clientv3.KV, key, what string, value []byte) ([]byte, bool, error) {
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value))).
		Commit()
	if err != nil {
		return nil, false, fmt.Errorf("writing %s to the datastore: %w", what, err)
	}
	if resp.Succeeded {
		return value, true, nil
	}
	got, err := kv.Get(ctx, key)
	if err != nil {
		return nil, false, fmt.Errorf("reading %s from the datastore: %w", what, err)
	}
	if len(got.Kvs) == 0 {
		return nil, false, fmt.Errorf("reading %s from the datastore: %s vanished", what, key)
	}
	return got.Kvs[0].Value, false, nil
}
