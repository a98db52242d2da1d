package flannel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flannel-io/flannel/pkg/lease"
	"github.com/flannel-io/flannel/pkg/subnet"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2/ktesting"
)

// leaseManager is a subnet manager whose CompleteLease answers with errs,
// one per call, then nil.
type leaseManager struct {
	subnet.Manager
	errs  []error
	calls int
}

func (m *leaseManager) CompleteLease(context.Context, *lease.Lease, *sync.WaitGroup) error {
	m.calls++
	if len(m.errs) == 0 {
		return nil
	}
	err := m.errs[0]
	m.errs = m.errs[1:]
	return err
}

// TestCompleteLeaseWaitsForTheAPI: marking the Node's network available
// is retried while no API server answers or the node-local endpoint
// answers the write with 503, so that a node that starts offline keeps
// its network (and itself) instead of ending; a refusal still ends it.
func TestCompleteLeaseWaitsForTheAPI(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("no API server answers")
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("no"))
	for _, tc := range []struct {
		name    string
		errs    []error
		wantErr bool
		calls   int
	}{
		{"taken at once", nil, false, 1},
		{"503 from the endpoint, then taken", []error{unavailable, unavailable}, false, 3},
		{"no server, then taken", []error{refused}, false, 2},
		{"refused", []error{forbidden}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			m := &leaseManager{errs: tc.errs}
			err := completeLease(ctx, m, &lease.Lease{}, &sync.WaitGroup{})
			if (err != nil) != tc.wantErr || m.calls != tc.calls {
				t.Errorf("completeLease: %v after %d calls, want error %v after %d", err, m.calls, tc.wantErr, tc.calls)
			}
			if tc.wantErr && !apierrors.IsForbidden(err) {
				t.Errorf("completeLease: %v, want the refusal", err)
			}
		})
	}
}

// TestUntilSynced: a subnet manager whose Nodes do not sync in flannel's
// wait is made again (its informer stopped) instead of ending flannel; any
// other error ends at once.
func TestUntilSynced(t *testing.T) {
	timedOut := fmt.Errorf("error waiting for nodeController to sync state: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name    string
		errs    []error
		wantErr bool
		calls   int
	}{
		{"synced at once", nil, false, 1},
		{"synced at the third wait", []error{timedOut, timedOut}, false, 3},
		{"net-conf.json unreadable", []error{errors.New("failed to read net conf")}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var ctxs []context.Context
			errs := tc.errs
			sm, stop, err := untilSynced(ctx, func(ctx context.Context) (subnet.Manager, error) {
				ctxs = append(ctxs, ctx)
				if len(errs) > 0 {
					err := errs[0]
					errs = errs[1:]
					return nil, err
				}
				return &leaseManager{}, nil
			})
			if (err != nil) != tc.wantErr || len(ctxs) != tc.calls {
				t.Fatalf("untilSynced: %v after %d calls, want error %v after %d", err, len(ctxs), tc.wantErr, tc.calls)
			}
			for i, c := range ctxs {
				last := i == len(ctxs)-1 && !tc.wantErr
				if stopped := c.Err() != nil; stopped == last {
					t.Errorf("attempt %d's informer stopped: %v, want %v", i+1, stopped, !last)
				}
			}
			if err == nil {
				if sm == nil {
					t.Fatal("no subnet manager")
				}
				stop()
				if ctxs[len(ctxs)-1].Err() == nil {
					t.Error("stop did not stop the synced manager's informer")
				}
			}
		})
	}
	t.Run("flannel stopping", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		calls := 0
		_, _, err := untilSynced(ctx, func(context.Context) (subnet.Manager, error) {
			calls++
			cancel()
			return nil, fmt.Errorf("error waiting for nodeController to sync state: %w", context.DeadlineExceeded)
		})
		if err == nil || calls != 1 {
			t.Errorf("untilSynced while stopping: %v after %d calls, want the error after 1", err, calls)
		}
	})
}
