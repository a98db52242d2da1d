package component

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// WaitSynced is the Ready of a component whose readiness is its informers'
// first lists: it waits until every one of synced has synced. name says
// which component was not started (synced empty).
func WaitSynced(ctx context.Context, name string, synced []cache.InformerSynced) error {
	if len(synced) == 0 {
		return fmt.Errorf("%s: not started", name)
	}
	return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, s := range synced {
			if !s() {
				return false, nil
			}
		}
		return true, nil
	})
}

// StopWorker is the Stop of a component that runs one background worker:
// it cancels the worker's context and waits until done is closed or ctx
// ends. A worker never started (cancel nil) has nothing to stop.
func StopWorker(ctx context.Context, cancel context.CancelFunc, done <-chan struct{}) error {
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
