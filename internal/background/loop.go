// Package background runs a component's loop in its own goroutine with the
// lifecycle edgeplane's components share: started once, stopped by
// cancelling it and waiting for it to return.
package background

import (
	"context"
	"sync"
)

// Loop is one background goroutine. The zero value is ready to use.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs fn in a goroutine, on a context that keeps ctx's values (its
// logger) but not its cancellation: only Stop ends it. It reports whether it
// started fn; a Loop runs once, so a second Start does nothing.
func (l *Loop) Start(ctx context.Context, fn func(context.Context)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return false
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	go func() {
		defer close(done)
		fn(runCtx)
	}()
	return true
}

// Stop cancels fn's context and waits for fn to return, bounded by ctx. It
// is valid in any state and may be called again.
func (l *Loop) Stop(ctx context.Context) error {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if done == nil {
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
