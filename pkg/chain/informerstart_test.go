package chain

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// TestInformerStartGoroutines starts informers of the API server's shared
// factory in both ways they are started (through Informers, as edgeplane's
// controllers do, and with a stop channel on the factory the API server's
// own post-start hook starts) and counts the goroutines the process gains
// besides each informer's own: an informer run under a context type the
// runtime does not know (client-go's Start(stopCh)) keeps one more,
// context.propagateCancel's, for the life of the process.
func TestInformerStartGoroutines(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a real chain on kine")
	}
	ctx := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0))))
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	env := newChainEnv(t, ctx)
	s := env.startInProcessServer(t, ctx)
	stop := make(chan struct{})
	defer close(stop)

	// Informers of types the API server does not read itself, so that each
	// case starts its own.
	for _, tc := range []struct {
		name  string
		start func() []cache.SharedIndexInformer
	}{
		{"Informers().Start", func() []cache.SharedIndexInformer {
			f := s.Informers()
			is := []cache.SharedIndexInformer{f.Batch().V1().Jobs().Informer(), f.Batch().V1().CronJobs().Informer(), f.Apps().V1().Deployments().Informer()}
			f.Start(stop)
			return is
		}},
		{"the API server's factory, Start(stopCh)", func() []cache.SharedIndexInformer {
			f := s.Informers().(*sharedInformers).SharedInformerFactory // what the post-start hook starts
			is := []cache.SharedIndexInformer{f.Apps().V1().DaemonSets().Informer(), f.Apps().V1().StatefulSets().Informer(), f.Networking().V1().Ingresses().Informer()}
			f.Start(stop)
			return is
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			watching, propagating := goroutinesAt(t, "cache.handleAnyWatch"), goroutinesCreatedBy(t, "context.(*cancelCtx).propagateCancel")
			is := tc.start()
			for _, i := range is {
				if !cache.WaitForCacheSync(ctx.Done(), i.HasSynced) {
					t.Fatal("not synced")
				}
			}
			// Each reflector derives its context when it starts watching.
			err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				return goroutinesAt(t, "cache.handleAnyWatch") >= watching+len(is), nil
			})
			if err != nil {
				t.Fatalf("the informers never watched: %v", err)
			}
			if got := goroutinesCreatedBy(t, "context.(*cancelCtx).propagateCancel") - propagating; got > 0 {
				t.Errorf("%d informers started, %d more goroutines propagating a cancellation (want 0)", len(is), got)
			}
		})
	}
}

// goroutinesCreatedBy counts the goroutines created by a function whose name
// ends in creator.
func goroutinesCreatedBy(t *testing.T, creator string) int {
	t.Helper()
	return strings.Count(goroutineDump(t), creator+" in goroutine ")
}

// goroutinesAt counts the goroutines with a frame of a function whose name
// ends in fn.
func goroutinesAt(t *testing.T, fn string) int {
	t.Helper()
	n := 0
	for g := range strings.SplitSeq(goroutineDump(t), "\n\n") {
		if strings.Contains(g, fn+"(") {
			n++
		}
	}
	return n
}

func goroutineDump(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// startInProcessServer starts a chain on env's datastore in the process
// and waits until it is ready; the test's end stops it.
func (env *chainEnv) startInProcessServer(t *testing.T, ctx context.Context) *Server {
	t.Helper()
	s, _ := env.newServer(t, filepath.Join(t.TempDir(), "config"), func(c *Config) {
		c.Storage.InProcess = env.store.Client().InProcess
	})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, c := context.WithTimeout(context.Background(), time.Minute)
		defer c()
		if err := s.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	if err := s.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}
