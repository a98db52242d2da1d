package chain

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/edgeplane/edgeplane/pkg/datastore"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/server/egressselector"
	serveroptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Upstream's storage factory gives each resource its own etcd client: one
// gRPC connection per built-in resource, about sixty. In edgeplane the
// datastore's server end (kine, or embedded etcd) lives in the same process,
// so each connection costs twice: a reader, a writer, keepalives, callback
// serializers and 32 KiB read and write buffers on either end, ~700
// goroutines in all, for a datastore that one connection serves as well
// (HTTP/2 multiplexes the requests; the etcd client puts every watch with the
// same metadata on one stream).
//
// shareStorageClients replaces the storage decorator that the storage
// factory's RESTOptions getter hands out with one that builds the same
// storage (upstream's etcd3 store, behind the watch cache where upstream
// puts one) on a client shared by every resource with the same transport.
// What the client leaves out of upstream's: gRPC client metrics and
// OpenTelemetry on the storage connection (the etcd_request_* metrics are
// kept: they wrap the store). For a datastore in this process, the shared
// client calls it directly, without gRPC (pkg/datastore/inprocess.go).

// Upstream's etcd client settings (storagebackend/factory, unexported).
const (
	storageDialTimeout      = 20 * time.Second
	storageKeepaliveTime    = 30 * time.Second
	storageKeepaliveTimeout = 10 * time.Second
)

// storageClients holds the shared clients, one per transport.
type storageClients struct {
	// inProcess, when set, makes the clients in-process ones.
	inProcess datastore.InProcessClient
	// compaction is the compaction interval (0: off).
	compaction time.Duration

	mu      sync.Mutex
	clients map[string]*storageClient
}

type storageClient struct {
	client    *kubernetes.Client
	compactor stoppableCompactor // nil with compaction off
	refs      int
}

// stoppableCompactor is a compactor the last user stops (quietCompactor).
type stoppableCompactor interface {
	etcd3.Compactor
	Stop()
}

// sharedClientsGetter is a RESTOptions getter whose storage uses the shared
// clients.
type sharedClientsGetter struct {
	*serveroptions.StorageFactoryRestOptionsFactory
	clients *storageClients
}

// shareStorageClients wraps the storage factory's RESTOptions getter; any
// other getter is returned as it is. With inProcess, the shared clients call
// the datastore in this process. compaction is the compaction interval (0:
// off): the storage config's own is 0, so that storage built on upstream's
// factory (outside this getter) starts no compactor of upstream's beside
// the quiet one (compaction.go).
func shareStorageClients(g generic.RESTOptionsGetter, inProcess datastore.InProcessClient, compaction time.Duration) generic.RESTOptionsGetter {
	return newStorageClients(inProcess, compaction).share(g)
}

// newStorageClients is an empty pool of shared clients.
func newStorageClients(inProcess datastore.InProcessClient, compaction time.Duration) *storageClients {
	return &storageClients{inProcess: inProcess, compaction: compaction, clients: map[string]*storageClient{}}
}

// share wraps a storage factory's RESTOptions getter so that its storage
// takes its clients from p; any other getter is returned as it is. The
// built-in resources' getter and the custom resources' (apiextensions
// builds its own, from a copy of the etcd options) share one pool: a
// custom resource's storage, made when the resource is first served, then
// needs no new connection either, and with an in-process datastore it does
// not depend on the datastore's socket.
func (p *storageClients) share(g generic.RESTOptionsGetter) generic.RESTOptionsGetter {
	f, ok := g.(*serveroptions.StorageFactoryRestOptionsFactory)
	if !ok {
		return g
	}
	return sharedClientsGetter{StorageFactoryRestOptionsFactory: f, clients: p}
}

func (g sharedClientsGetter) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	o, err := g.StorageFactoryRestOptionsFactory.GetRESTOptions(resource, example)
	if err != nil || o.StorageConfig == nil || o.StorageConfig.Type != storagebackend.StorageTypeETCD3 && o.StorageConfig.Type != "" {
		return o, err
	}
	// Only storage behind the watch cache shares; uncached storage and the
	// compactor keep their own clients, as upstream's. (kine's own watch
	// service answers a progress request on a stream only when every watch on
	// it has seen the current revision, so a watch without progress
	// notifications on the shared stream would hold the watch caches back. The
	// watch hub in pkg/datastore, which serves in its place, has no such limit;
	// the split stays as upstream has it.)
	cached, err := g.cachedByUpstream(resource)
	if err != nil {
		return generic.RESTOptions{}, err
	}
	if cached {
		o.Decorator = g.clients.cachedDecorator()
	}
	return o, nil
}

// cachedByUpstream tells whether upstream's getter put the resource's storage
// behind the watch cache, by the rule it applies
// (StorageFactoryRestOptionsFactory.GetRESTOptions, k8s.io/apiserver
// v0.37.2): with the watch cache on, every resource but one given a size of
// 0 or less. (The decorator it returns does not say: StorageWithCacher is a
// closure with no identity to compare.) TestCachedByUpstream checks the rule
// against upstream's getter.
func (g sharedClientsGetter) cachedByUpstream(resource schema.GroupResource) (bool, error) {
	if !g.Options.EnableWatchCache {
		return false, nil
	}
	sizes, err := serveroptions.ParseWatchCacheSizes(g.Options.WatchCacheSizes)
	if err != nil {
		return false, err
	}
	size, ok := sizes[resource]
	return !ok || size > 0, nil
}

// cachedDecorator is upstream's StorageWithCacher on a shared client.
func (p *storageClients) cachedDecorator() generic.StorageDecorator {
	return func(config *storagebackend.ConfigForResource, resourcePrefix string,
		keyFunc func(obj runtime.Object) (string, error), newFunc, newListFunc func() runtime.Object,
		getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
		s, destroy, err := p.newStore(*config, newFunc, newListFunc, resourcePrefix)
		if err != nil {
			return s, destroy, err
		}
		c, err := cacher.NewCacherFromConfig(cacher.Config{
			Storage:             s,
			Versioner:           storage.APIObjectVersioner{},
			GroupResource:       config.GroupResource,
			EventsHistoryWindow: config.EventsHistoryWindow,
			ResourcePrefix:      resourcePrefix,
			KeyFunc:             keyFunc,
			NewFunc:             newFunc,
			NewListFunc:         newListFunc,
			GetAttrsFunc:        getAttrs,
			IndexerFuncs:        triggers,
			Indexers:            indexers,
			Codec:               config.Codec,
		})
		if err != nil {
			destroy()
			return nil, func() {}, err
		}
		delegator := cacher.NewCacheDelegator(c, s)
		var once sync.Once
		return delegator, func() {
			once.Do(func() {
				delegator.Stop()
				c.Stop()
				destroy()
			})
		}, nil
	}
}

// newStore is upstream's newETCD3Storage on a shared client.
func (p *storageClients) newStore(c storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error) {
	client, compactor, release, err := p.acquire(c)
	if err != nil {
		return nil, nil, err
	}
	transformer := c.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	decoder := etcd3.NewDefaultDecoder(c.Codec, versioner)
	unsafeDelete := utilfeature.DefaultFeatureGate.Enabled(genericfeatures.AllowUnsafeMalformedObjectDeletion)
	if unsafeDelete {
		transformer = etcd3.WithCorruptObjErrorHandlingTransformer(transformer)
		decoder = etcd3.WithCorruptObjErrorHandlingDecoder(decoder)
	}
	store, err := etcd3.New(client, compactor, c.Codec, newFunc, newListFunc, c.Prefix, resourcePrefix, c.GroupResource, transformer, c.LeaseManagerConfig, decoder, versioner)
	if err != nil {
		release()
		return nil, nil, err
	}
	var once sync.Once
	destroy := func() {
		once.Do(func() {
			store.Close()
			release()
		})
	}
	var s storage.Interface = store
	if unsafeDelete {
		s = etcd3.NewStoreWithUnsafeCorruptObjectDeletion(s, c.GroupResource)
	}
	return s, destroy, nil
}

// acquire returns the client for c's transport, creating it (and its
// compactor, as upstream starts one per datastore) for the first store.
func (p *storageClients) acquire(c storagebackend.ConfigForResource) (*kubernetes.Client, etcd3.Compactor, func(), error) {
	key := strings.Join(append([]string{c.Transport.KeyFile, c.Transport.CertFile, c.Transport.TrustedCAFile}, c.Transport.ServerList...), "\x00")
	p.mu.Lock()
	defer p.mu.Unlock()
	sc := p.clients[key]
	if sc == nil {
		client, err := p.newClient(c.Transport)
		if err != nil {
			return nil, nil, nil, err
		}
		// Latency metrics per request, as upstream decorates each client.
		client.KV = etcd3.NewETCDLatencyTracker(client.KV)
		sc = &storageClient{client: client}
		if p.compaction > 0 {
			// Its own client, as upstream's (see GetRESTOptions).
			newClient := func() (*clientv3.Client, error) {
				cc, err := p.newClient(c.Transport)
				if err != nil {
					return nil, err
				}
				return cc.Client, nil
			}
			if sc.compactor, err = startQuietCompactor(c.Transport.ServerList, newClient, p.compaction); err != nil {
				_ = client.Close()
				return nil, nil, nil, err
			}
		}
		p.clients[key] = sc
		klog.V(2).InfoS("Storage shares one datastore client", "servers", c.Transport.ServerList, "inProcess", p.inProcess != nil)
	}
	sc.refs++
	// newStore releases once: on its error path or in its destroy.
	return sc.client, sc.compactor, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if sc.refs--; sc.refs == 0 {
			if sc.compactor != nil {
				sc.compactor.Stop()
			}
			_ = sc.client.Close()
			delete(p.clients, key)
		}
	}, nil
}

// newClient returns an in-process client when there is one, else one that
// connects to c.
func (p *storageClients) newClient(c storagebackend.TransportConfig) (*kubernetes.Client, error) {
	if p.inProcess == nil {
		return newStorageClient(c)
	}
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background().WithName("storage-client")), storageDialTimeout)
	defer cancel()
	cli, err := p.inProcess(ctx)
	if err != nil {
		return nil, fmt.Errorf("datastore client: %w", err)
	}
	kc := &kubernetes.Client{Client: cli}
	kc.Kubernetes = kc
	return kc, nil
}

// newStorageClient connects as upstream's newETCD3Client does (TLS, egress
// dialer, timeouts, keepalives), without its metrics and tracing
// interceptors.
func newStorageClient(c storagebackend.TransportConfig) (*kubernetes.Client, error) {
	tlsInfo := transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.TrustedCAFile}
	tlsConfig, err := tlsInfo.ClientConfig()
	if err != nil {
		return nil, err
	}
	if c.CertFile == "" && c.KeyFile == "" && c.TrustedCAFile == "" {
		tlsConfig = nil
	}
	var dialOptions []grpc.DialOption
	if c.EgressLookup != nil {
		dial, err := c.EgressLookup(egressselector.Etcd.AsNetworkContext())
		if err != nil {
			return nil, err
		}
		if dial != nil {
			dialOptions = append(dialOptions, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return dial(ctx, "tcp", addr)
			}))
		}
	}
	client, err := kubernetes.New(clientv3.Config{
		DialTimeout:          storageDialTimeout,
		DialKeepAliveTime:    storageKeepaliveTime,
		DialKeepAliveTimeout: storageKeepaliveTimeout,
		DialOptions:          dialOptions,
		Endpoints:            c.ServerList,
		TLS:                  tlsConfig,
		Logger:               datastore.ZapLogger(klog.Background().WithName("storage-client")),
	})
	if err != nil {
		return nil, fmt.Errorf("datastore client: %w", err)
	}
	if err := waitConnected(client); err != nil {
		_ = client.Close()
		return nil, err
	}
	return client, nil
}

// waitConnected waits up to the dial timeout for the client's connection to
// be ready, as upstream does before it uses a new client.
func waitConnected(client *kubernetes.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), storageDialTimeout)
	defer cancel()
	conn := client.ActiveConnection()
	if conn == nil {
		return fmt.Errorf("datastore client: no gRPC connection")
	}
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, state) {
			return fmt.Errorf("datastore client: connection not ready (%s): %w", state, ctx.Err())
		}
	}
}
