package certs

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Renewer runs Ensure periodically while the server runs, so that leaf
// certificates are renewed once less than a third of their life is left
// without a restart. The API server, etcd and client-go reload the files.
//
// Its lifecycle follows the bootstrap's component contract: Start launches
// the loop, Ready is immediate, Stop is idempotent and valid in any state.
type Renewer struct {
	opts     Options
	interval time.Duration
	onIssue  func(ctx context.Context, names []string)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewRenewer returns a Renewer that calls Ensure with o every interval (when
// zero: a thirtieth of the leaf lifetime, between a second and an hour) and
// then onIssue, if not nil, with the names of the leaves it re-issued.
func NewRenewer(o Options, interval time.Duration, onIssue func(ctx context.Context, names []string)) *Renewer {
	if interval <= 0 {
		v := o.LeafValidity
		if v == 0 {
			v = leafValidity
		}
		interval = min(max(v/30, time.Second), time.Hour)
	}
	return &Renewer{opts: o, interval: interval, onIssue: onIssue}
}

// Name implements the component contract.
func (r *Renewer) Name() string { return "cert-renewer" }

// Start launches the renewal loop; it runs until Stop.
func (r *Renewer) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return nil
	}
	logger := klog.FromContext(ctx).WithName("cert-renewer")
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	r.cancel, r.done = cancel, make(chan struct{})
	go r.loop(runCtx, r.done)
	logger.V(1).Info("Renewing certificates while running", "checkEvery", r.interval)
	return nil
}

func (r *Renewer) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.check(ctx)
	}
}

// check renews what is due; errors are logged and retried on the next tick.
func (r *Renewer) check(ctx context.Context) {
	logger := klog.FromContext(ctx)
	_, issued, err := ensure(ctx, r.opts)
	if err != nil {
		if ctx.Err() == nil {
			logger.Error(err, "Checking certificates for renewal; retrying", "in", r.interval)
		}
		return
	}
	if len(issued) == 0 {
		return
	}
	logger.Info("Renewed certificates while running", "certificates", issued)
	if r.onIssue != nil {
		r.onIssue(ctx, issued)
	}
}

// Ready implements the component contract: the loop needs no warm-up.
func (r *Renewer) Ready(context.Context) error { return nil }

// Stop ends the loop and waits for a check in progress, bounded by ctx.
func (r *Renewer) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
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
