package component

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// events is the order in which fake components were called.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	e.log = append(e.log, s)
	e.mu.Unlock()
}

// fakeComponent fails Start or Ready when told to; with block, Ready waits for
// its context (another component's failure must cancel it).
type fakeComponent struct {
	name               string
	startErr, readyErr error
	block              bool
	readyAfter         time.Duration
	ev                 *events
}

func (f *fakeComponent) Name() string { return f.name }
func (f *fakeComponent) Start(context.Context) error {
	f.ev.add("start " + f.name)
	return f.startErr
}
func (f *fakeComponent) Ready(ctx context.Context) error {
	if f.block {
		<-ctx.Done()
		f.ev.add("cancelled " + f.name)
		return ctx.Err()
	}
	time.Sleep(f.readyAfter)
	if f.readyErr == nil {
		f.ev.add("ready " + f.name)
	}
	return f.readyErr
}
func (f *fakeComponent) Stop(context.Context) error {
	f.ev.add("stop " + f.name)
	return nil
}

func TestStartTogether(t *testing.T) {
	broken := errors.New("broken")
	for _, tc := range []struct {
		name        string
		a, b        fakeComponent
		wantErr     string
		wantStarted []string // m.started after, the earlier "store" included
		wantLog     []string // order of Start calls and of Stop calls; Ready order is free
	}{
		{
			name: "both ready", a: fakeComponent{readyAfter: 20 * time.Millisecond}, b: fakeComponent{},
			wantStarted: []string{"store", "a", "b"},
			wantLog:     []string{"start a", "start b", "ready a", "ready b"},
		},
		{
			name: "second not ready: first cancelled, both stopped newest first", a: fakeComponent{block: true}, b: fakeComponent{readyErr: broken},
			wantErr: "b: broken", wantStarted: []string{"store"},
			wantLog: []string{"start a", "start b", "cancelled a", "stop b", "stop a"},
		},
		{
			name: "first not ready: second cancelled", a: fakeComponent{readyErr: broken}, b: fakeComponent{block: true},
			wantErr: "a: broken", wantStarted: []string{"store"},
			wantLog: []string{"start a", "start b", "cancelled b", "stop b", "stop a"},
		},
		{
			name: "second fails to start: no Ready, both stopped", a: fakeComponent{block: true}, b: fakeComponent{startErr: broken},
			wantErr: "b: broken", wantStarted: []string{"store"},
			wantLog: []string{"start a", "start b", "stop b", "stop a"},
		},
		{
			name: "first fails to start: second never started", a: fakeComponent{startErr: broken}, b: fakeComponent{},
			wantErr: "a: broken", wantStarted: []string{"store"},
			wantLog: []string{"start a", "stop a"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ev := &events{}
			a, b := tc.a, tc.b
			a.name, b.name, a.ev, b.ev = "a", "b", ev, ev
			var m Manager
			if err := m.Start(ctx, &fakeComponent{name: "store", ev: &events{}}, time.Second); err != nil {
				t.Fatal(err)
			}
			err := m.StartTogether(ctx, time.Second, &a, &b)
			if (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
			var started []string
			for _, c := range m.started {
				started = append(started, c.Name())
			}
			if !slices.Equal(started, tc.wantStarted) {
				t.Errorf("started %v, want %v", started, tc.wantStarted)
			}
			if !sameEvents(ev.log, tc.wantLog) {
				t.Errorf("calls %v, want %v", ev.log, tc.wantLog)
			}
			if err == nil {
				var phases []string
				for _, p := range m.timeline {
					phases = append(phases, p.Name)
				}
				if want := []string{"store", "a", "b"}; !slices.Equal(phases, want) {
					t.Errorf("timeline %v, want %v", phases, want)
				}
				if m.timeline[1].Duration < 20*time.Millisecond {
					t.Errorf("phase a took %s, want at least its Ready's 20ms", m.timeline[1].Duration)
				}
				ev.log = nil
				if err := m.StopAll(ctx, time.Second); err != nil {
					t.Fatal(err)
				}
				if want := []string{"stop b", "stop a"}; !slices.Equal(ev.log, want) {
					t.Errorf("stopAll calls %v, want %v", ev.log, want)
				}
			}
		})
	}
}

// sameEvents compares call logs: Start and Stop calls in order, the rest
// (Ready, which runs concurrently) as a set before the first Stop.
func sameEvents(got, want []string) bool {
	filter := func(s []string, keep func(string) bool) []string {
		var out []string
		for _, x := range s {
			if keep(x) {
				out = append(out, x)
			}
		}
		return out
	}
	ordered := func(x string) bool { return strings.HasPrefix(x, "start ") || strings.HasPrefix(x, "stop ") }
	other := func(x string) bool { return !ordered(x) }
	if !slices.Equal(filter(got, ordered), filter(want, ordered)) {
		return false
	}
	g, w := filter(got, other), filter(want, other)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}
