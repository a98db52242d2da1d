package controllers

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

var podsPrivate = privateType{obj: &corev1.Pod{}, resource: corev1.SchemeGroupVersion.WithResource("pods")}

// TestTermInformersEveryGroup walks every group, version and resource of
// client-go's SharedInformerFactory through termInformers: each informer must
// be a termInformer on the shared factory's (so that Shutdown can remove the
// handlers registered on it), except Pods, which must be the component's own.
// A group termInformers does not build through itself (a group client-go adds
// and termInformers does not override) fails it.
func TestTermInformersEveryGroup(t *testing.T) {
	// The walk only builds informers; nothing lists or watches.
	client := kubernetes.NewForConfigOrDie(clientcmdConfig(t))
	shared := informers.NewSharedInformerFactory(client, 0)
	own := informers.NewSharedInformerFactory(client, 0)
	f := newTermInformers("test", shared, own, 0, podsPrivate)

	var walked int
	fv := reflect.ValueOf(f)
	it := reflect.TypeFor[informers.SharedInformerFactory]()
	for m := range it.Methods() {
		if m.Type.NumIn() != 0 || m.Type.NumOut() != 1 || m.Type.Out(0).Kind() != reflect.Interface || m.Name == "InformerName" {
			continue
		}
		group := fv.MethodByName(m.Name).Call(nil)[0]
		for vm := range group.Type().Methods() {
			version := group.MethodByName(vm.Name).Call(nil)[0]
			for rm := range version.Type().Methods() {
				typed := version.MethodByName(rm.Name).Call(nil)[0]
				got := untyped(typed.MethodByName("Informer").Call(nil)[0].Interface().(cache.SharedIndexInformer))
				name := m.Name + "()." + vm.Name + "()." + rm.Name + "()"
				walked++
				if m.Name == "Core" && vm.Name == "V1" && rm.Name == "Pods" {
					if got != untyped(own.Core().V1().Pods().Informer()) {
						t.Errorf("%s: not the component's own informer", name)
					}
					continue
				}
				ti, ok := got.(*termInformer)
				if !ok {
					t.Errorf("%s: a %T, not a termInformer: its handlers would outlive the term", name, got)
					continue
				}
				sharedOne := reflect.ValueOf(shared).MethodByName(m.Name).Call(nil)[0].MethodByName(vm.Name).Call(nil)[0].
					MethodByName(rm.Name).Call(nil)[0].MethodByName("Informer").Call(nil)[0].Interface().(cache.SharedIndexInformer)
				if ti.SharedIndexInformer != untyped(sharedOne) {
					t.Errorf("%s: not the shared factory's informer", name)
				}
			}
		}
	}
	if walked < 50 {
		t.Fatalf("walked %d informers; the walk is broken", walked)
	}
	t.Logf("%d informers", walked)

	for _, tc := range []struct {
		resource string
		own      bool
	}{{"pods", true}, {"nodes", false}, {"services", false}} {
		g, err := f.ForResource(corev1.SchemeGroupVersion.WithResource(tc.resource))
		if err != nil {
			t.Fatal(err)
		}
		if _, isTerm := untyped(g.Informer()).(*termInformer); isTerm == tc.own {
			t.Errorf("ForResource(%s): a %T", tc.resource, g.Informer())
		}
	}
}

// TestTermInformersShutdown registers handlers on the API server's Nodes
// informer through termInformers, in each of the three ways, and checks that
// they see a Node created during the term and, after Shutdown, not one
// created after it, while a handler of the API server's own still does (the
// informer runs on).
func TestTermInformersShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server")
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srv := testapiserver.Start(t, ctx)
	client := srv.Client(t)
	shared := srv.Chain.Informers()

	var serverSaw atomic.Int32
	reg, err := shared.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { serverSaw.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shared.Core().V1().Nodes().Informer().RemoveEventHandler(reg) }()

	register := []struct {
		name string
		add  func(cache.SharedIndexInformer, cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
	}{
		{"AddEventHandler", func(i cache.SharedIndexInformer, h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
			return i.AddEventHandler(h)
		}},
		{"AddEventHandlerWithResyncPeriod", func(i cache.SharedIndexInformer, h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
			return i.AddEventHandlerWithResyncPeriod(h, time.Hour)
		}},
		{"AddEventHandlerWithOptions", func(i cache.SharedIndexInformer, h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
			return i.AddEventHandlerWithOptions(h, cache.HandlerOptions{})
		}},
	}
	for n, tc := range register {
		t.Run(tc.name, func(t *testing.T) {
			own := informers.NewSharedInformerFactory(client, 0)
			f := newTermInformers("test", shared, own, 0, podsPrivate)
			var saw atomic.Int32
			if _, err := tc.add(f.Core().V1().Nodes().Informer(), cache.ResourceEventHandlerFuncs{
				AddFunc: func(obj any) {
					if obj.(*corev1.Node).Name != "" {
						saw.Add(1)
					}
				},
			}); err != nil {
				t.Fatal(err)
			}
			if f.registered() != 1 {
				t.Fatalf("%d handlers kept, want 1", f.registered())
			}
			f.Start(ctx.Done())
			if !cache.WaitForCacheSync(ctx.Done(), f.Core().V1().Nodes().Informer().HasSynced) {
				t.Fatal("Nodes not synced")
			}
			before := saw.Load()
			createTermNode(t, ctx, client, "during-"+string(rune('a'+n)))
			poll(t, ctx, "the term's handler sees the Node created during the term", func(context.Context) (bool, error) { return saw.Load() > before, nil })

			f.Shutdown()
			if f.registered() != 0 {
				t.Fatalf("%d handlers kept after Shutdown", f.registered())
			}
			if _, err := f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{}); err == nil {
				t.Error("a handler registered after Shutdown")
			}
			after, server := saw.Load(), serverSaw.Load()
			createTermNode(t, ctx, client, "after-"+string(rune('a'+n)))
			poll(t, ctx, "the API server's handler sees the Node created after the term", func(context.Context) (bool, error) { return serverSaw.Load() > server, nil })
			if got := saw.Load(); got != after {
				t.Errorf("the ended term's handler saw %d more Nodes", got-after)
			}
		})
	}

	// Indexes stay on the informer: a later term of the component adds its
	// own again, another component's index of the same name is a conflict.
	byName := func(obj any) ([]string, error) { return []string{obj.(*corev1.Node).Name}, nil }
	for _, tc := range []struct {
		component string
		conflict  bool
	}{{"indexer", false}, {"indexer", false}, {"another", true}} {
		f := newTermInformers(tc.component, shared, informers.NewSharedInformerFactory(client, 0), 0, podsPrivate)
		err := f.Core().V1().Nodes().Informer().AddIndexers(cache.Indexers{"test-by-name": byName})
		f.Shutdown()
		if (err != nil) != tc.conflict {
			t.Errorf("%s adds index test-by-name: %v, want a conflict: %t", tc.component, err, tc.conflict)
		}
	}

	// What would change the informer for every reader is refused.
	f := newTermInformers("test", shared, informers.NewSharedInformerFactory(client, 0), 0, podsPrivate)
	defer f.Shutdown()
	if err := f.Core().V1().Nodes().Informer().SetTransform(func(o any) (any, error) { return o, nil }); err == nil {
		t.Error("SetTransform on a shared informer: no error")
	}
}

// untyped is the informer a typed informer of client-go wraps
// (cache.NewTypedSharedIndexInformer), or i.
func untyped(i cache.SharedIndexInformer) cache.SharedIndexInformer {
	if _, ok := i.(*termInformer); ok {
		return i
	}
	v := reflect.ValueOf(i)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct {
		if f := v.FieldByName("SharedIndexInformer"); f.IsValid() {
			return f.Interface().(cache.SharedIndexInformer)
		}
	}
	return i
}

func createTermNode(t *testing.T, ctx context.Context, client kubernetes.Interface, name string) {
	t.Helper()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// clientcmdConfig is a client configuration for a server that is never
// contacted.
func clientcmdConfig(t *testing.T) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("https://127.0.0.1:1", "")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
