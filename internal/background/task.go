package background

import "context"

// Task is a named background loop with the lifecycle of edgeplane's
// components (pkg/bootstrap): Start runs fn in its own goroutine and returns
// at once, Ready is nil, Stop cancels fn's context and waits for fn to
// return. A process's background work (GC pacing, releasing start-up pages,
// test hooks) runs as Tasks so that the component manager stops it with the
// rest, instead of leaving goroutines nobody waits for.
type Task struct {
	name string
	fn   func(context.Context)
	loop Loop
}

// NewTask returns a Task that runs fn, which must return once its context
// is cancelled.
func NewTask(name string, fn func(context.Context)) *Task {
	return &Task{name: name, fn: fn}
}

// Name is the task's name.
func (t *Task) Name() string { return t.name }

// Start runs fn on a context that keeps ctx's values but not its
// cancellation: only Stop ends it. A second Start does nothing.
func (t *Task) Start(ctx context.Context) error {
	t.loop.Start(ctx, t.fn)
	return nil
}

// Ready is nil: a task has nothing to wait for.
func (t *Task) Ready(context.Context) error { return nil }

// Stop cancels fn's context and waits for it to return, bounded by ctx.
func (t *Task) Stop(ctx context.Context) error { return t.loop.Stop(ctx) }
