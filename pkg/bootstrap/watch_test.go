package bootstrap

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
			var m manager
			comps := map[string]*enderComponent{}
			for _, name := range []string{"datastore", "apiserver"} {
				c := &enderComponent{fakeComponent: fakeComponent{name: name, ev: ev}, done: make(chan struct{})}
				comps[name] = c
				if err := m.start(ctx, c, time.Second); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.start(ctx, &fakeComponent{name: "controllers", ev: ev}, time.Second); err != nil {
				t.Fatal(err)
			}
			taskStopped := make(chan struct{})
			task := background.NewTask("pacer", func(ctx context.Context) { <-ctx.Done(); close(taskStopped) })
			if err := m.startBackground(ctx, task); err != nil {
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
			got := m.watch(watchCtx)
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
			if err := m.stopAll(ctx, time.Second); err != nil {
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
