package datastore

import (
	"context"
	"testing"
	"time"
)

// TestEndsOnFault: a datastore broken from inside after it was ready (kine's
// socket closed, etcd's member stopped) reports it through Done and Err, a
// stopped one does not, and Stop still works after the fault.
func TestEndsOnFault(t *testing.T) {
	type ender interface {
		Done() <-chan struct{}
		Err() error
	}
	for _, tc := range []struct {
		typ   string
		fault bool
	}{
		{TypeSQLite, true},
		{TypeEtcd, true},
		{TypeSQLite, false},
		{TypeEtcd, false},
	} {
		name := tc.typ + "/stopped"
		if tc.fault {
			name = tc.typ + "/fault"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			ds := startReady(ctx, t, testOptions(t, tc.typ, t.TempDir()))
			e, ok := ds.(ender)
			if !ok {
				t.Fatalf("%T has no Done and Err", ds)
			}
			done := e.Done()
			if done == nil {
				t.Fatal("Done is nil after Start")
			}
			select {
			case <-done:
				t.Fatalf("Done closed before any fault: %v", e.Err())
			default:
			}
			if !tc.fault {
				stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if err := ds.Stop(stopCtx); err != nil {
					t.Fatal(err)
				}
				select {
				case <-done:
					t.Fatalf("Stop closed Done (%v): a stop asked for is not an end", e.Err())
				case <-time.After(500 * time.Millisecond):
				}
				return
			}
			begin := time.Now()
			if err := InjectFault(ds); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Done not closed 10 s after the fault")
			}
			err := e.Err()
			if err == nil {
				t.Fatal("Done closed with a nil Err")
			}
			t.Logf("ended %s after the fault: %v", time.Since(begin).Round(time.Millisecond), err)
			stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := ds.Stop(stopCtx); err != nil {
				t.Fatalf("Stop after the fault: %v", err)
			}
		})
	}
}
