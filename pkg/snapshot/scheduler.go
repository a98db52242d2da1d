package snapshot

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"

	"github.com/edgeplane/edgeplane/pkg/rawstore"
)

// DefaultSchedule takes a snapshot every 12 hours, at 00:00 and 12:00.
const DefaultSchedule = "0 */12 * * *"

// ParseSchedule checks a --snapshot-schedule value: standard five-field cron
// syntax or a descriptor such as "@every 6h" or "@daily".
func ParseSchedule(spec string) (s cron.Schedule, err error) {
	defer func() {
		// robfig/cron panics on some inputs (for example "CRON_TZ=").
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("--snapshot-schedule %q: not a cron schedule (%v)", spec, r)
		}
	}()
	s, err = cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("--snapshot-schedule %q: %w", spec, err)
	}
	// A schedule that never matches ("0 0 30 2 *") has a zero Next, on
	// which the scheduler's loop would snapshot without pause.
	if now := time.Now(); !s.Next(now).After(now) {
		return nil, fmt.Errorf("--snapshot-schedule %q: never fires (no matching time in the next five years)", spec)
	}
	return s, nil
}

// SchedulerOptions configures a Scheduler.
type SchedulerOptions struct {
	Schedule  string // cron syntax; see ParseSchedule
	Retention int    // scheduled snapshots kept, at least 1
	Dir       string // <data-dir>/snapshots
	// Open connects to the datastore for one snapshot.
	Open func(ctx context.Context) (*rawstore.Store, error)
	// Now names the snapshots; time.Now when nil.
	Now func() time.Time
}

// Scheduler takes snapshots on a schedule while the server runs and prunes
// the scheduled ones beyond Retention. Its lifecycle follows the bootstrap's
// component contract (Start, Ready, idempotent Stop).
type Scheduler struct {
	opts     SchedulerOptions
	schedule cron.Schedule

	loop background.Loop
}

// NewScheduler validates o.
func NewScheduler(o SchedulerOptions) (*Scheduler, error) {
	sched, err := ParseSchedule(o.Schedule)
	if err != nil {
		return nil, err
	}
	if o.Retention < 1 {
		return nil, fmt.Errorf("--snapshot-retention %d: keep at least 1", o.Retention)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Scheduler{opts: o, schedule: sched}, nil
}

// Name implements the component contract.
func (s *Scheduler) Name() string { return "snapshots" }

// Start launches the schedule.
func (s *Scheduler) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("snapshots")
	if s.loop.Start(klog.NewContext(ctx, logger), s.run) {
		logger.Info("Scheduled snapshots", "schedule", s.opts.Schedule, "next", s.schedule.Next(time.Now()).Round(time.Second), "keep", s.opts.Retention, "dir", s.opts.Dir)
	}
	return nil
}

// run takes one snapshot at a time; a run that overlaps the next slot delays it.
func (s *Scheduler) run(ctx context.Context) {
	for {
		next := s.schedule.Next(time.Now())
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.RunOnce(ctx)
	}
}

// RunOnce takes one scheduled snapshot and prunes; errors are logged.
func (s *Scheduler) RunOnce(ctx context.Context) {
	logger := klog.FromContext(ctx)
	begin := time.Now()
	store, err := s.opts.Open(ctx)
	if err != nil {
		logger.Error(err, "Scheduled snapshot: opening the datastore")
		return
	}
	path, err := Save(ctx, store, s.opts.Dir, ScheduledName, s.opts.Now())
	if cerr := store.Close(ctx); cerr != nil {
		logger.V(1).Info("Closing the datastore after a snapshot", "err", cerr)
	}
	if err != nil {
		logger.Error(err, "Scheduled snapshot failed")
		return
	}
	logger.Info("Saved scheduled snapshot", "path", path, "duration", time.Since(begin).Round(time.Millisecond))
	removed, err := Prune(s.opts.Dir, ScheduledName, s.opts.Retention)
	if err != nil {
		logger.Error(err, "Pruning scheduled snapshots")
	}
	for _, p := range removed {
		logger.V(1).Info("Pruned snapshot", "path", p)
	}
}

// Ready implements the component contract.
func (s *Scheduler) Ready(context.Context) error { return nil }

// Stop ends the schedule, waiting for a snapshot in progress, bounded by ctx.
func (s *Scheduler) Stop(ctx context.Context) error { return s.loop.Stop(ctx) }
