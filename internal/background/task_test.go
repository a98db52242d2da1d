package background

import (
	"context"
	"testing"
	"time"
)

// TestTask: a task outlives the context it was started with and ends on
// Stop, which waits for it; Stop before Start and twice is fine.
func TestTask(t *testing.T) {
	running := make(chan struct{})
	var returned bool
	task := NewTask("test-task", func(ctx context.Context) {
		close(running)
		<-ctx.Done()
		returned = true
	})
	if task.Name() != "test-task" {
		t.Errorf("Name() = %q", task.Name())
	}
	if err := task.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	startCtx, cancel := context.WithCancel(context.Background())
	if err := task.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	<-running
	cancel() // start-up is over; the task runs on
	if err := task.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	for i := 0; i < 2; i++ {
		if err := task.Stop(stopCtx); err != nil {
			t.Fatalf("Stop %d: %v", i+1, err)
		}
		if !returned {
			t.Fatalf("Stop %d returned before the task did", i+1)
		}
	}
}
