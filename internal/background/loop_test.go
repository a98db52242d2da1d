package background

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

func TestLoop(t *testing.T) {
	var l Loop
	if err := l.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}

	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "logger"))
	started := make(chan string, 2)
	release := make(chan struct{})
	ended := make(chan struct{})
	fn := func(ctx context.Context) {
		v, _ := ctx.Value(ctxKey{}).(string)
		started <- v
		<-ctx.Done()
		close(ended)
		<-release
	}
	if !l.Start(parent, fn) {
		t.Fatal("first Start did not start")
	}
	if l.Start(parent, fn) {
		t.Fatal("second Start started again")
	}
	if v := <-started; v != "logger" {
		t.Fatalf("the loop's context lost the parent's values: %q", v)
	}
	cancelParent()
	select {
	case <-ended:
		t.Fatal("cancelling Start's context ended the loop; only Stop should")
	case <-time.After(50 * time.Millisecond):
	}

	// fn is held up after its context ends: Stop gives up at its deadline.
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Stop(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop while fn runs on = %v, want DeadlineExceeded", err)
	}
	close(release)
	if err := l.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after fn returned: %v", err)
	}
	if err := l.Stop(context.Background()); err != nil {
		t.Fatalf("Stop again: %v", err)
	}
	select {
	case <-started:
		t.Fatal("fn ran twice")
	default:
	}
}
