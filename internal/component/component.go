// Package component is the small lifecycle every edgeplane part shares, and
// the manager that starts parts in order and stops what started in reverse,
// as k0s's component manager does:
//
//	New -> Start -> Ready -> (runs; an Ender may end on its own) -> Stop
//
// pkg/bootstrap starts the control plane with it, pkg/node a node's parts.
package component

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Component is one part of the control plane, started in order and stopped in
// reverse:
//
//	Start: launch and return promptly; ctx bounds start-up only.
//	Ready: nil once dependents may proceed.
//	Stop:  idempotent, valid in any state, bounded by ctx.
type Component interface {
	Name() string
	Start(ctx context.Context) error
	Ready(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Ender is a Component that can end on its own once started: a server whose
// listener failed, a datastore member that stopped. Done is closed then and
// Err says why. A Stop asked for need not close Done. The manager watches
// every started Ender (Manager.Watch): one that ends takes the process down.
type Ender interface {
	Done() <-chan struct{}
	Err() error
}

// EndedError says which component ended on its own, and why.
type EndedError struct {
	Component string
	Err       error
}

func (e *EndedError) Error() string {
	if e.Err == nil {
		return e.Component + " stopped unexpectedly"
	}
	return e.Component + " stopped unexpectedly: " + e.Err.Error()
}

func (e *EndedError) Unwrap() error { return e.Err }

// Phase is one entry of the start-up timeline.
type Phase struct {
	Name     string
	Duration time.Duration
}

// Manager starts components in order and remembers which ones started, so a
// failure (or shutdown) stops exactly those, newest first.
type Manager struct {
	started  []Component
	timeline []Phase
}

// Start runs Start then Ready for c, recording the phase. On error the
// component is stopped too (it may have started goroutines before failing).
func (m *Manager) Start(ctx context.Context, c Component, stopTimeout time.Duration) error {
	return m.StartTogether(ctx, stopTimeout, c)
}

// StartTogether starts components that do not depend on each other at the
// same time: Start on each in order, then every Ready at once. Each phase is
// recorded with the time from the common begin to its own Ready, so the
// phases overlap in the timeline. Once all are ready they count as started in
// the order given, and StopAll stops them in reverse. When one fails, the
// others' Ready is cancelled and every one whose Start was called is stopped,
// newest first; the error is the first failure's.
func (m *Manager) StartTogether(ctx context.Context, stopTimeout time.Duration, cs ...Component) error {
	logger := klog.FromContext(ctx)
	begin := time.Now()
	readyCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		mu       sync.Mutex
		failed   error
		launched []Component
		took     = make([]time.Duration, len(cs))
	)
	fail := func(c Component, err error) {
		mu.Lock()
		defer mu.Unlock()
		if failed == nil {
			failed = fmt.Errorf("%s: %w", c.Name(), err)
			cancel()
		}
	}
	for _, c := range cs {
		logger.V(1).Info("Starting component", "component", c.Name())
		launched = append(launched, c) // Start may leave goroutines behind even when it fails
		if err := c.Start(ctx); err != nil {
			fail(c, err)
			break
		}
	}
	if failed == nil {
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Go(func() {
				if err := c.Ready(readyCtx); err != nil {
					fail(c, err)
					return
				}
				took[i] = time.Since(begin)
			})
		}
		wg.Wait()
	}
	if failed != nil {
		for i := len(launched) - 1; i >= 0; i-- {
			stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
			if err := launched[i].Stop(stopCtx); err != nil {
				logger.Error(err, "Stopping a component that failed to start", "component", launched[i].Name())
			}
			stopCancel()
		}
		return failed
	}
	m.started = append(m.started, cs...)
	for i, c := range cs {
		m.Record(ctx, c.Name(), took[i])
	}
	return nil
}

// StartBackground starts c, which has nothing to wait for, after start-up:
// no phase in the timeline, stopped with the rest.
func (m *Manager) StartBackground(ctx context.Context, c Component) error {
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("%s: %w", c.Name(), err)
	}
	m.started = append(m.started, c)
	return nil
}

// Watch blocks until ctx is done (nil) or a started component that is an
// Ender ends on its own; it returns which one and why.
func (m *Manager) Watch(ctx context.Context) *EndedError {
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}}
	var enders []Component
	for _, c := range m.started {
		e, ok := c.(Ender)
		if !ok {
			continue
		}
		done := e.Done()
		if done == nil {
			continue
		}
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)})
		enders = append(enders, c)
	}
	i, _, _ := reflect.Select(cases)
	if i == 0 {
		return nil
	}
	c := enders[i-1]
	err := c.(Ender).Err()
	// A component made of parts (a node) ends when one of them does: the
	// part is named, not the whole.
	if inner, ok := err.(*EndedError); ok {
		return inner
	}
	return &EndedError{Component: c.Name(), Err: err}
}

// Record adds a phase to the timeline and logs it.
func (m *Manager) Record(ctx context.Context, name string, d time.Duration) {
	m.timeline = append(m.timeline, Phase{Name: name, Duration: d})
	klog.FromContext(ctx).Info("Start-up phase done", "phase", name, "duration", d.Round(time.Millisecond))
}

// StopAll stops the started components in reverse order, each bounded by
// perComponent, and returns every error.
func (m *Manager) StopAll(ctx context.Context, perComponent time.Duration) error {
	logger := klog.FromContext(ctx)
	var errs []error
	for i := len(m.started) - 1; i >= 0; i-- {
		c := m.started[i]
		begin := time.Now()
		stopCtx, cancel := context.WithTimeout(ctx, perComponent)
		err := c.Stop(stopCtx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", c.Name(), err))
			logger.Error(err, "Stopping component", "component", c.Name())
			continue
		}
		logger.Info("Stopped component", "component", c.Name(), "duration", time.Since(begin).Round(time.Millisecond))
	}
	m.started = nil
	return errors.Join(errs...)
}
