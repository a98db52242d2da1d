package bootstrap

import (
	"context"
	"errors"
	"fmt"
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

// Phase is one entry of the start-up timeline.
type Phase struct {
	Name     string
	Duration time.Duration
}

// manager starts components in order and remembers which ones started, so a
// failure (or shutdown) stops exactly those, newest first.
type manager struct {
	started  []Component
	timeline []Phase
}

// start runs Start then Ready for c, recording the phase. On error the
// component is stopped too (it may have started goroutines before failing).
func (m *manager) start(ctx context.Context, c Component, stopTimeout time.Duration) error {
	logger := klog.FromContext(ctx)
	begin := time.Now()
	logger.V(1).Info("Starting component", "component", c.Name())
	err := c.Start(ctx)
	if err == nil {
		err = c.Ready(ctx)
	}
	if err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
		defer cancel()
		if serr := c.Stop(stopCtx); serr != nil {
			logger.Error(serr, "Stopping a component that failed to start", "component", c.Name())
		}
		return fmt.Errorf("%s: %w", c.Name(), err)
	}
	m.started = append(m.started, c)
	m.record(ctx, c.Name(), time.Since(begin))
	return nil
}

// record adds a phase to the timeline and logs it.
func (m *manager) record(ctx context.Context, name string, d time.Duration) {
	m.timeline = append(m.timeline, Phase{Name: name, Duration: d})
	klog.FromContext(ctx).Info("Start-up phase done", "phase", name, "duration", d.Round(time.Millisecond))
}

// stopAll stops the started components in reverse order, each bounded by
// perComponent, and returns every error.
func (m *manager) stopAll(ctx context.Context, perComponent time.Duration) error {
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
