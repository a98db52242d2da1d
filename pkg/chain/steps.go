package chain

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// buildSteps times the steps of building the chain, for the start-up
// timeline: the apiserver phase is most of a start, and its one duration
// does not say which step took it.
type buildSteps struct {
	start, last time.Time
	kv          []any
}

func newBuildSteps() *buildSteps {
	now := time.Now()
	return &buildSteps{start: now, last: now}
}

// done ends the step called name.
func (b *buildSteps) done(name string) {
	now := time.Now()
	b.kv = append(b.kv, name, now.Sub(b.last).Round(time.Millisecond))
	b.last = now
}

// log writes the steps as one line of the start-up timeline.
func (b *buildSteps) log(ctx context.Context) {
	kv := append([]any{"duration", b.last.Sub(b.start).Round(time.Millisecond)}, b.kv...)
	klog.FromContext(ctx).Info("API server built", kv...)
}
