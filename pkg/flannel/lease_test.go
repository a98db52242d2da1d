package flannel

import (
	"context"
	"errors"
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
