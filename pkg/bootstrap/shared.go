package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/datastore"
	"github.com/edgeplane/edgeplane/pkg/join"
)

// sharedTimeout bounds each read or write of the bootstrap data.
const sharedTimeout = 30 * time.Second

// sharedStore is a --datastore-endpoint datastore, started before the
// certificates because the cluster's CAs may come from it.
type sharedStore struct {
	store   datastore.Datastore
	shared  bool
	dataDir string
	token   join.Token
	// published is true once the data dir holds the cluster's bootstrap data
	// (read from the datastore, or written to it by publish).
	published bool
}

// startShared starts the --datastore-endpoint datastore and, when it is
// shared and already holds a cluster's bootstrap data, decrypts that data
// into the data dir so that certs.Ensure reuses the cluster's CAs. It returns
// nil without --datastore-endpoint.
func (s *server) startShared(ctx context.Context, o CompletedOptions) (*sharedStore, error) {
	if o.Cluster.DatastoreEndpoint == "" {
		return nil, nil
	}
	logger := klog.FromContext(ctx)
	store, err := datastore.New(datastore.Options{
		Type: o.Datastore, DataDir: o.DataDir, SQLiteSync: o.SQLiteSynchronous, SQLiteCommitWindow: o.SQLiteCommitWindow,
		Endpoint: o.Cluster.DatastoreEndpoint, EndpointCAFile: o.Cluster.DatastoreCAFile,
		EndpointCertFile: o.Cluster.DatastoreCertFile, EndpointKeyFile: o.Cluster.DatastoreKeyFile,
	})
	if err != nil {
		return nil, err
	}
	if err := s.mgr.Start(ctx, store, stopTimeout); err != nil {
		return nil, err
	}
	sh := &sharedStore{store: store, shared: o.Cluster.Shared, dataDir: o.DataDir}
	if !sh.shared {
		return sh, nil
	}

	token, haveToken, err := sh.localToken(o)
	if err != nil {
		return nil, err
	}
	blob, err := withClient(ctx, store, func(ctx context.Context, kv kvClient) ([]byte, error) { return join.Load(ctx, kv) })
	if err != nil {
		return nil, err
	}
	if blob == nil {
		if !haveToken {
			if token.Secret, err = join.NewSecret(); err != nil {
				return nil, err
			}
		}
		sh.token = token
		logger.Info("The shared datastore holds no cluster yet: this server creates it")
		return sh, nil
	}
	if !haveToken {
		return nil, errors.New("the shared datastore already holds a cluster: pass its --token (`edgeplane token` on one of its servers prints it)")
	}
	if err := sh.adopt(blob, token); err != nil {
		return nil, err
	}
	logger.Info("Joined the cluster in the shared datastore: using its CAs and keys")
	return sh, nil
}

// localToken is --token, else the token kept in the data dir.
func (sh *sharedStore) localToken(o CompletedOptions) (join.Token, bool, error) {
	if o.Cluster.Token != nil {
		return *o.Cluster.Token, true, nil
	}
	t, ok, err := join.ReadTokenFile(o.DataDir)
	return t, ok, err
}

// adopt decrypts the cluster's bootstrap data, checks it against the token
// and writes it into the data dir.
func (sh *sharedStore) adopt(blob []byte, token join.Token) error {
	data, err := join.Open(blob, token.Secret)
	if err != nil {
		return err
	}
	ca := data[join.ServerCAFile]
	if err := token.VerifyCA(ca); err != nil {
		return err
	}
	if _, err := data.Apply(sh.dataDir); err != nil {
		return err
	}
	token.CAHash = join.CAHash(ca)
	sh.token, sh.published = token, true
	return join.WriteTokenFile(sh.dataDir, token)
}

// publish writes this server's CAs and keys as the cluster's bootstrap data
// when the shared datastore holds none yet. Call it once the data dir holds
// every shared file (after certs.Ensure and the secrets encryption key).
func (sh *sharedStore) publish(ctx context.Context) error {
	if sh == nil || !sh.shared || sh.published {
		return nil
	}
	data, err := join.Collect(sh.dataDir)
	if err != nil {
		return err
	}
	ca := data[join.ServerCAFile]
	if err := sh.token.VerifyCA(ca); err != nil {
		return fmt.Errorf("--token: %w", err)
	}
	blob, err := data.Seal(sh.token.Secret)
	if err != nil {
		return err
	}
	var won bool
	stored, err := withClient(ctx, sh.store, func(ctx context.Context, kv kvClient) ([]byte, error) {
		stored, w, err := join.Publish(ctx, kv, blob)
		won = w
		return stored, err
	})
	if err != nil {
		return err
	}
	if !won {
		// Another server created the cluster first; its data must match
		// what this one already uses, or this one has to start over.
		theirs, err := join.Open(stored, sh.token.Secret)
		if err != nil {
			return fmt.Errorf("another server created the cluster at the same time: %w", err)
		}
		if !sameFile(theirs, data, join.ServerCAFile) {
			return errors.New("another server created the cluster in the shared datastore at the same time with other CAs; stop this server, empty its --data-dir and start it again with that cluster's --token")
		}
	}
	sh.token.CAHash = join.CAHash(ca)
	sh.published = true
	if err := join.WriteTokenFile(sh.dataDir, sh.token); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Cluster created in the shared datastore; `edgeplane token` prints the join token for other servers",
		"tokenFile", filepath.Join(sh.dataDir, join.TokenFileName))
	return nil
}

func sameFile(a, b join.Data, rel string) bool { return string(a[rel]) == string(b[rel]) }

type kvClient = clientv3.KV

// withClient runs f with an etcd3 client of store, bounded by sharedTimeout.
func withClient(ctx context.Context, store datastore.Datastore, f func(context.Context, kvClient) ([]byte, error)) ([]byte, error) {
	cli, err := datastore.NewClient(store.Client(), klog.FromContext(ctx).WithName("bootstrap-data"))
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, sharedTimeout)
	defer cancel()
	return f(ctx, cli)
}
