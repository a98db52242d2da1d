package component

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

func TestWaitSynced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := WaitSynced(ctx, "x", nil); err == nil || !strings.Contains(err.Error(), "x: not started") {
		t.Fatalf("no informers: %v, want 'x: not started'", err)
	}
	var calls atomic.Int32
	later := func() bool { return calls.Add(1) > 2 }
	if err := WaitSynced(ctx, "x", []cache.InformerSynced{func() bool { return true }, later}); err != nil {
		t.Fatalf("informers that sync: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if err := WaitSynced(short, "x", []cache.InformerSynced{func() bool { return false }}); err == nil {
		t.Fatal("an informer that never syncs: no error")
	}
}

func TestStopWorker(t *testing.T) {
	if err := StopWorker(context.Background(), nil, nil); err != nil {
		t.Fatalf("never started: %v", err)
	}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-ctx.Done(); close(done) }()
	if err := StopWorker(context.Background(), cancel, done); err != nil {
		t.Fatalf("a worker that ends: %v", err)
	}
	stuck := make(chan struct{})
	waitCtx, cancelWait := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelWait()
	if err := StopWorker(waitCtx, func() {}, stuck); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a worker that does not end: %v, want the deadline", err)
	}
}
