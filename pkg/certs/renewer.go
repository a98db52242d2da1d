package certs

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
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
	// clockEvery is how often the wall clock is compared with the
	// monotonic one (clockWatch).
	clockEvery time.Duration

	loop background.Loop
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
	return &Renewer{opts: o, interval: interval, onIssue: onIssue, clockEvery: min(clockWatchEvery, interval)}
}

// A board without a real-time clock boots with its clock in the past and
// jumps forward when NTP answers, maybe past the expiry of every leaf; the
// ticker runs on the monotonic clock and would check again only at its next
// tick, up to an hour later. So the loop also compares the wall clock's
// progress with the monotonic clock's every clockWatchEvery and checks at
// once when they part by more than clockJumpTolerance (either way: a jump
// back may leave leaves not yet valid).
const (
	clockWatchEvery    = 10 * time.Second
	clockJumpTolerance = 30 * time.Second
)

// clockSample is a reading of the wall clock (opts.Now, without a
// monotonic reading) and of the monotonic clock at the same moment.
type clockSample struct{ wall, mono time.Time }

func (r *Renewer) sampleClock() clockSample {
	now := r.opts.Now // nil in the server: Ensure defaults it on its copy
	if now == nil {
		now = time.Now
	}
	return clockSample{wall: now().Round(0), mono: time.Now()}
}

// jump is how far the wall clock moved beyond (or, negative, behind) the
// monotonic clock since s.
func (s clockSample) jump(now clockSample) time.Duration {
	return now.wall.Sub(s.wall) - now.mono.Sub(s.mono)
}

// Name implements the component contract.
func (r *Renewer) Name() string { return "cert-renewer" }

// Start launches the renewal loop; it runs until Stop.
func (r *Renewer) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("cert-renewer")
	if r.loop.Start(klog.NewContext(ctx, logger), r.run) {
		logger.V(1).Info("Renewing certificates while running", "checkEvery", r.interval)
	}
	return nil
}

func (r *Renewer) run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	clock := time.NewTicker(r.clockEvery)
	defer clock.Stop()
	last := r.sampleClock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-clock.C:
			now := r.sampleClock()
			jump := last.jump(now)
			last = now
			if jump.Abs() <= clockJumpTolerance {
				continue
			}
			klog.FromContext(ctx).Info("The wall clock jumped; checking certificates now", "by", jump.Round(time.Second), "clock", now.wall.UTC())
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
func (r *Renewer) Stop(ctx context.Context) error { return r.loop.Stop(ctx) }
