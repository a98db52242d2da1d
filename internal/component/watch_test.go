package component

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/background"
)

// enderComponent is a fake component that can end on its own.
type enderComponent struct {
	fakeComponent
	done chan struct{}
	err  error
}

func (e *enderComponent) Done() <-chan struct{} { return e.done }
func (e *enderComponent) Err() error            { return e.err }

// TestWatch: the manager's watch returns the started component that ended
// on its own, with its error, or nil on shutdown; then stopAll stops every
// component, the ended one and the background tasks included, newest first.
func TestWatch(t *testing.T) {
	broken := errors.New("listener closed")
	for _, tc := range []struct {
		name     string
		end      string // which component ends; "" = shutdown instead
		wantLine string
	}{
		{"the datastore ends", "datastore", "datastore stopped unexpectedly: listener closed"},
		{"the apiserver ends", "apiserver", "apiserver stopped unexpectedly: listener closed"},
		{"shutdown", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ev := &events{}
			var m Manager
			comps := map[string]*enderComponent{}
			for _, name := range []string{"datastore", "apiserver"} {
				c := &enderComponent{fakeComponent: fakeComponent{name: name, ev: ev}, done: make(chan struct{})}
				comps[name] = c
				if err := m.Start(ctx, c, time.Second); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.Start(ctx, &fakeComponent{name: "controllers", ev: ev}, time.Second); err != nil {
				t.Fatal(err)
			}
			taskStopped := make(chan struct{})
			task := background.NewTask("pacer", func(ctx context.Context) { <-ctx.Done(); close(taskStopped) })
			if err := m.StartBackground(ctx, task); err != nil {
				t.Fatal(err)
			}
			watchCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			if tc.end != "" {
				c := comps[tc.end]
				c.err = broken
				close(c.done)
			} else {
				cancel()
			}
			got := m.Watch(watchCtx)
			switch {
			case tc.end == "" && got != nil:
				t.Fatalf("watch on shutdown = %v, want nil", got)
			case tc.end != "" && got == nil:
				t.Fatal("watch = nil, want the ended component")
			case tc.end != "":
				if got.Error() != tc.wantLine || !errors.Is(got, broken) {
					t.Errorf("watch = %q, want %q wrapping the component's error", got, tc.wantLine)
				}
			}
			if err := m.StopAll(ctx, time.Second); err != nil {
				t.Fatal(err)
			}
			select {
			case <-taskStopped:
			default:
				t.Error("stopAll did not stop the background task")
			}
			want := []string{"start datastore", "ready datastore", "start apiserver", "ready apiserver",
				"start controllers", "ready controllers", "stop controllers", "stop apiserver", "stop datastore"}
			ev.mu.Lock()
			log := slices.Clone(ev.log)
			ev.mu.Unlock()
			if !slices.Equal(log, want) {
				t.Errorf("events %v, want %v", log, want)
			}
		})
	}
}

// statusPart is a part that works in the background with a Status.
type statusPart struct {
	name string
	Status
}

func (p *statusPart) Name() string                    { return p.name }
func (p *statusPart) Start(context.Context) error     { return nil }
func (p *statusPart) Ready(ctx context.Context) error { return p.WaitReady(ctx) }
func (p *statusPart) Stop(context.Context) error      { return nil }

// TestWatchNamesThePart: a component made of parts (a node) that ends
// because one part ended is reported as that part, with its error, and a
// part's end before it was ready is what its Ready returns.
func TestWatchNamesThePart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	broken := errors.New("no interface holds the node address")
	part := &statusPart{name: "flannel"}
	var inner Manager
	if err := inner.StartBackground(ctx, part); err != nil {
		t.Fatal(err)
	}
	whole := &statusPart{name: "node"}
	go func() {
		if ended := inner.Watch(ctx); ended != nil {
			whole.End(ended)
		}
	}()
	var outer Manager
	if err := outer.StartBackground(ctx, whole); err != nil {
		t.Fatal(err)
	}
	part.End(broken)
	got := outer.Watch(ctx)
	if got == nil || got.Component != "flannel" || !errors.Is(got, broken) {
		t.Fatalf("Watch = %v, want flannel's end with its error", got)
	}
	if err := part.Ready(ctx); !errors.Is(err, broken) {
		t.Fatalf("Ready after the end = %v, want the end's error", err)
	}
}
