package datastore

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
)

// The datastore's server end runs in the API server's process (kine, or
// embedded etcd), yet the API server's storage reached it through gRPC: each
// request and each watch event marshalled by one side and unmarshalled by the
// other, framed in HTTP/2, through a socket and through the gRPC goroutines
// on either side. An in-process client calls the datastore's etcd services
// directly instead, with etcd's adapters from server to client interfaces
// (go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter), as etcd's own
// in-process client (v3client) does for an embedded etcd: requests and
// responses are handed over as Go values. Watches of kine are served by the
// watch hub itself (hubWatcher). Everything else (the etcdctl-style commands, snapshots, joining
// servers, an external client) still uses the socket.

// InProcessClient returns a new client of a datastore in this process; the
// caller closes it. nil when the datastore is elsewhere.
type InProcessClient func(context.Context) (*clientv3.Client, error)

// etcdServices are the etcd API services a kine datastore serves.
type etcdServices struct {
	kv          etcdserverpb.KVServer
	lease       etcdserverpb.LeaseServer
	watch       *watchServer
	cluster     etcdserverpb.ClusterServer
	maintenance etcdserverpb.MaintenanceServer
}

// client returns a client that calls the services directly.
func (s etcdServices) client(lg logr.Logger) *clientv3.Client {
	c := clientv3.NewCtxClient(context.Background(), clientv3.WithZapLogger(ZapLogger(lg)))
	c.KV = clientv3.NewKVFromKVClient(adapter.KvServerToKvClient(s.kv), c)
	// One second for a keep-alive's first response, as etcd's v3client.
	c.Lease = clientv3.NewLeaseFromLeaseClient(adapter.LeaseServerToLeaseClient(s.lease), c, time.Second)
	c.Watcher = newHubWatcher(s.watch)
	c.Cluster = clientv3.NewClusterFromClusterClient(adapter.ClusterServerToClusterClient(s.cluster), c)
	c.Maintenance = clientv3.NewMaintenanceFromMaintenanceClient(adapter.MaintenanceServerToMaintenanceClient(s.maintenance), c)
	return c
}

// etcdInProcess returns the in-process client of an embedded etcd server:
// etcd's own v3client, which goes through the same quota, raft and watch
// code as its gRPC service.
func etcdInProcess(s *etcdserver.EtcdServer) InProcessClient {
	return func(ctx context.Context) (*clientv3.Client, error) {
		select {
		case <-s.StopNotify():
			return nil, errors.New("datastore: etcd has stopped")
		default:
		}
		return v3client.New(s), nil
	}
}
