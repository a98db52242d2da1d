package chain

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/pkg/datastore"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	serveroptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/kubeapiserver"
)

// TestSharedStorageClients builds storage for two resources, one behind the
// watch cache and one not, through the storage factory kube-apiserver uses
// and the shared-client getter, on kine and a real SQLite file, with a client
// through kine's socket and with one that calls kine in this process. It
// checks that both use one client of the kind asked for, that each stores and
// reads back an object and the cached one delivers a watch event, that the
// client goes when the last storage is destroyed, and that other getters are
// left alone.
func TestSharedStorageClients(t *testing.T) {
	for _, inProcess := range []bool{false, true} {
		t.Run(map[bool]string{false: "socket", true: "in-process"}[inProcess], func(t *testing.T) {
			testSharedStorageClients(t, inProcess)
		})
	}
}

func testSharedStorageClients(t *testing.T, inProcess bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ds, err := datastore.New(datastore.Options{Type: datastore.TypeSQLite, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ds.Stop(context.Background()) })
	if err := ds.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ds.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	var direct datastore.InProcessClient
	if inProcess {
		direct = ds.Client().InProcess
	}

	etcd := serveroptions.NewEtcdOptions(storagebackend.NewDefaultConfig("/registry", nil))
	etcd.StorageConfig.Transport.ServerList = ds.Client().Endpoints
	etcd.WatchCacheSizes = []string{"podtemplates#0"} // no watch cache
	storageFactory, err := kubeapiserver.NewStorageFactoryConfig().Complete(etcd).New()
	if err != nil {
		t.Fatal(err)
	}
	getter, ok := shareStorageClients(&serveroptions.StorageFactoryRestOptionsFactory{Options: *etcd, StorageFactory: storageFactory}, direct, 0).(sharedClientsGetter)
	if !ok {
		t.Fatal("the storage factory's getter was not wrapped")
	}

	type store struct {
		s       storage.Interface
		destroy factory.DestroyFunc
	}
	var stores []store
	for _, resource := range []string{"configmaps", "secrets"} {
		o, err := getter.GetRESTOptions(schema.GroupResource{Resource: resource}, nil)
		if err != nil {
			t.Fatal(err)
		}
		prefix := "/" + o.ResourcePrefix // as the registry's store does
		keyFunc := func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc(prefix+"/", obj) }
		s, destroy, err := o.Decorator(o.StorageConfig, prefix, keyFunc,
			func() runtime.Object { return &api.ConfigMap{} }, func() runtime.Object { return &api.ConfigMapList{} },
			storage.DefaultNamespaceScopedAttr, nil, nil)
		if err != nil {
			t.Fatalf("%s storage: %v", resource, err)
		}
		if _, cached := s.(*cacher.CacheDelegator); !cached {
			t.Errorf("%s storage is not behind the watch cache", resource)
		}
		stores = append(stores, store{s, destroy})
	}
	if n := len(getter.clients.clients); n != 1 {
		t.Fatalf("%d datastore clients for two resources, want 1", n)
	}
	for _, sc := range getter.clients.clients {
		// An in-process client has no gRPC connection.
		if conn := sc.client.ActiveConnection(); (conn == nil) != inProcess {
			t.Errorf("gRPC connection %v, want one: %v", conn, !inProcess)
		}
	}

	for i, st := range stores {
		key := []string{"/configmaps/default/shared", "/secrets/default/shared"}[i]
		in := &api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "default"}, Data: map[string]string{"i": string(rune('0' + i))}}
		if err := st.s.Create(ctx, key, in, &api.ConfigMap{}, 0); err != nil {
			t.Fatalf("create %s: %v", key, err)
		}
		got := &api.ConfigMap{}
		if err := st.s.Get(ctx, key, storage.GetOptions{}, got); err != nil || got.Data["i"] != in.Data["i"] {
			t.Fatalf("%s reads %v, %v", key, got.Data, err)
		}
	}

	// A watch through the watch cache, which lists and watches the datastore
	// through the shared client.
	var w watch.Interface
	for w == nil {
		// Refused until the watch cache has its first list.
		if w, err = stores[0].s.Watch(ctx, "/configmaps/default", storage.ListOptions{ResourceVersion: "0", Predicate: storage.Everything, Recursive: true}); err != nil {
			select {
			case <-ctx.Done():
				t.Fatalf("watch: %v", err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	defer w.Stop()
	later := &api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: "default"}}
	if err := stores[0].s.Create(ctx, "/configmaps/default/later", later, &api.ConfigMap{}, 0); err != nil {
		t.Fatal(err)
	}
	for seen := false; !seen; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			// The watch cache hands out its own wrapper of the object.
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetName() == "later" && ev.Type == watch.Added {
				seen = true
			}
		case <-ctx.Done():
			t.Fatal("no watch event for the new ConfigMap")
		}
	}

	stores[0].destroy()
	if n := len(getter.clients.clients); n != 1 {
		t.Errorf("%d clients while one storage is left, want 1", n)
	}
	stores[1].destroy()
	stores[1].destroy() // upstream calls destroy functions more than once
	if n := len(getter.clients.clients); n != 0 {
		t.Errorf("%d clients after the last storage went, want 0", n)
	}

	// Storage without a watch cache keeps upstream's own client: its
	// watches ask for no progress notifications (storageclient.go).
	o, err := getter.GetRESTOptions(schema.GroupResource{Resource: "podtemplates"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !isUndecorated(o.Decorator) {
		t.Error("uncached storage was given the shared client")
	}

	other := generic.RESTOptionsGetter(fixedGetter{})
	if shareStorageClients(other, nil, 0) != other {
		t.Error("a getter other than the storage factory's was wrapped")
	}
}

type fixedGetter struct{}

func (fixedGetter) GetRESTOptions(schema.GroupResource, runtime.Object) (generic.RESTOptions, error) {
	return generic.RESTOptions{}, nil
}

// isUndecorated tells upstream's UndecoratedStorage by its code pointer, the
// one decorator upstream's getter hands out that has a stable identity.
func isUndecorated(d generic.StorageDecorator) bool {
	return reflect.ValueOf(d).Pointer() == reflect.ValueOf(generic.StorageDecorator(generic.UndecoratedStorage)).Pointer()
}

// TestCachedByUpstream checks cachedByUpstream's copy of upstream's rule
// against upstream's getter itself, for every case the rule has: it fails
// when upstream decides differently (then follow it in cachedByUpstream).
func TestCachedByUpstream(t *testing.T) {
	configmaps := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name       string
		watchCache bool
		sizes      []string
	}{
		{"watch cache off", false, nil},
		{"watch cache on", true, nil},
		{"size 0 turns it off", true, []string{"configmaps#0"}},
		{"a positive size is ignored", true, []string{"configmaps#100"}},
		{"another resource's size", true, []string{"secrets#0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			etcd := serveroptions.NewEtcdOptions(storagebackend.NewDefaultConfig("/registry", nil))
			etcd.StorageConfig.Transport.ServerList = []string{"unix:///nonexistent"} // never dialled
			etcd.EnableWatchCache = tc.watchCache
			etcd.WatchCacheSizes = tc.sizes
			storageFactory, err := kubeapiserver.NewStorageFactoryConfig().Complete(etcd).New()
			if err != nil {
				t.Fatal(err)
			}
			upstream := &serveroptions.StorageFactoryRestOptionsFactory{Options: *etcd, StorageFactory: storageFactory}
			o, err := upstream.GetRESTOptions(configmaps, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantCached := !isUndecorated(o.Decorator)
			got, err := sharedClientsGetter{StorageFactoryRestOptionsFactory: upstream}.cachedByUpstream(configmaps)
			if err != nil {
				t.Fatal(err)
			}
			if got != wantCached {
				t.Fatalf("cachedByUpstream = %v, upstream's getter cached = %v", got, wantCached)
			}
		})
	}
}
