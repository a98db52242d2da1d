package controllers

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// blockingTerm is ready at once and runs until ctx ends.
func blockingTerm(calls *atomic.Int32) termFunc {
	return func(ctx context.Context, ready func()) error {
		calls.Add(1)
		ready()
		<-ctx.Done()
		return errors.New("upstream says: finished")
	}
}

func within(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	_ = cancel // released by the timeout
	return ctx
}

func TestRunnerLifecycle(t *testing.T) {
	var calls atomic.Int32
	r := newRunner("test", "test", "", false, blockingTerm(&calls))
	if err := r.ready(within(time.Second)); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("ready before start = %v", err)
	}
	if err := r.check(); err == nil {
		t.Fatal("healthy before start")
	}
	if err := r.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.start(context.Background()); err == nil {
		t.Fatal("second start succeeded")
	}
	if err := r.ready(within(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := r.check(); err != nil {
		t.Fatalf("check while running = %v", err)
	}
	for range 2 { // idempotent
		if err := r.stop(within(5 * time.Second)); err != nil {
			t.Fatalf("stop = %v", err)
		}
	}
	if err := r.check(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("check after stop = %v", err)
	}
	if err := r.start(context.Background()); err == nil {
		t.Fatal("start after stop succeeded")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("term ran %d times, want 1", n)
	}
}

func TestRunnerStopBeforeStart(t *testing.T) {
	var calls atomic.Int32
	r := newRunner("test", "test", "", false, blockingTerm(&calls))
	if err := r.stop(within(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := r.start(context.Background()); err == nil {
		t.Fatal("start after stop succeeded")
	}
	if calls.Load() != 0 {
		t.Fatal("term ran")
	}
}

func TestRunnerFailsBeforeReady(t *testing.T) {
	boom := errors.New("bad kubeconfig")
	r := newRunner("test", "test", "", false, func(context.Context, func()) error { return boom })
	if err := r.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.ready(within(5 * time.Second)); !errors.Is(err, boom) {
		t.Fatalf("ready = %v, want %v", err, boom)
	}
	if err := r.check(); !errors.Is(err, boom) {
		t.Fatalf("check = %v, want %v", err, boom)
	}
	if err := r.stop(within(time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestRunnerRestartsAfterReady(t *testing.T) {
	defer setVar(&minRestartDelay, 10*time.Millisecond)()
	var calls atomic.Int32
	r := newRunner("test", "test", "", false, func(ctx context.Context, ready func()) error {
		ready()
		if calls.Add(1) == 1 {
			return errors.New("lost the apiserver")
		}
		<-ctx.Done()
		return nil
	})
	if err := r.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.ready(within(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a second term", func() bool { return calls.Load() == 2 && r.check() == nil })
	if err := r.stop(within(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestRunnerStopIsBounded(t *testing.T) {
	release := make(chan struct{})
	r := newRunner("test", "test", "", false, func(_ context.Context, ready func()) error {
		ready()
		<-release // ignores its context
		return nil
	})
	if err := r.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.ready(within(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := r.stop(within(100 * time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stop = %v, want a deadline error", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("stop took %s", d)
	}
	close(release)
	if err := r.stop(within(5 * time.Second)); err != nil {
		t.Fatalf("second stop = %v", err)
	}
}

// TestRunnerLeaderElection runs two runners on one lease: one works, the
// other stands by (and is ready), and on shutdown the first ends its term
// before the lease is released, after which the second takes over.
func TestRunnerLeaderElection(t *testing.T) {
	defer setVar(&leaseDuration, 2*time.Second)()
	defer setVar(&renewDeadline, time.Second)()
	defer setVar(&retryPeriod, 100*time.Millisecond)()

	client := fake.NewClientset()
	var mu sync.Mutex
	var events []string
	record := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	term := func(name string) termFunc {
		return func(ctx context.Context, ready func()) error {
			record(name + " started")
			ready()
			<-ctx.Done()
			time.Sleep(200 * time.Millisecond) // slow shutdown
			record(name + " ended")
			return nil
		}
	}
	a := newRunner("a", "test-lease", "", true, term("a"))
	a.newLock = fakeLock(client)
	if err := a.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.ready(within(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b := newRunner("b", "test-lease", "", true, term("b"))
	b.newLock = fakeLock(client)
	if err := b.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.ready(within(10 * time.Second)); err != nil {
		t.Fatalf("standby not ready: %v", err)
	}
	if err := b.check(); err != nil {
		t.Fatalf("standby unhealthy: %v", err)
	}

	if err := a.stop(within(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to take over", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) == 3
	})
	if err := b.stop(within(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	want := []string{"a started", "a ended", "b started", "b ended"}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(events, ",") != strings.Join(want, ",") {
		t.Fatalf("events = %v, want %v", events, want)
	}
}

func fakeLock(client kubernetes.Interface) func(string) (resourcelock.Interface, error) {
	return func(identity string) (resourcelock.Interface, error) {
		return resourcelock.New(resourcelock.LeasesResourceLock, "kube-system", "test-lease",
			client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity})
	}
}

func setVar[T any](p *T, v T) (restore func()) {
	old := *p
	*p = v
	return func() { *p = old }
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Both components can be added to an API server's health checks.
var (
	_ healthz.HealthChecker = (*ControllerManager)(nil)
	_ healthz.HealthChecker = (*Scheduler)(nil)
)
