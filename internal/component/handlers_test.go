package component

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"
	"k8s.io/klog/v2/ktesting"
)

// TestHandlers: handlers added to a running shared informer see its
// objects, Synced turns true once they have, and after Remove they see
// nothing more while the informer runs on for others.
func TestHandlers(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	source := fcache.NewFakeControllerSource()
	source.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	inf := cache.NewSharedIndexInformer(source, &corev1.Node{}, time.Hour, cache.Indexers{})
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Go(func() { inf.RunWithContext(runCtx) })
	defer func() { stop(); running.Wait() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}

	var mu sync.Mutex
	var seen []string
	var hs Handlers
	if err := hs.Add(inf, cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, obj.(*corev1.Node).Name)
	}}); err != nil {
		t.Fatal(err)
	}
	if err := WaitSynced(ctx, "test", hs.Synced()); err != nil {
		t.Fatal(err)
	}
	seenNow := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
	if got := seenNow(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("synced having seen %v, want [a]", got)
	}

	// A second handler, kept, tells when the informer has delivered b.
	sawB := make(chan struct{})
	var once sync.Once
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if obj.(*corev1.Node).Name == "b" {
			once.Do(func() { close(sawB) })
		}
	}}); err != nil {
		t.Fatal(err)
	}
	hs.Remove(logger)
	hs.Remove(logger) // idempotent
	source.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}})
	select {
	case <-sawB:
	case <-ctx.Done():
		t.Fatal("the informer stopped delivering")
	}
	// Each listener has its own queue: give a removed one the same chance.
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		return len(seenNow()) > 1, nil
	})
	if got := seenNow(); len(got) != 1 {
		t.Errorf("after Remove the handler saw %v, want only [a]", got)
	}
	if inf.IsStopped() {
		t.Error("Remove stopped the informer")
	}
}
