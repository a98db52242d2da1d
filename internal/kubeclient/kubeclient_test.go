package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestTransient: one rule for every part: an API server that is starting,
// busy or briefly gone is retried; its refusals and errors that did not
// come from talking to it are not.
func TestTransient(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"unavailable (starting)", apierrors.NewServiceUnavailable("starting"), true},
		{"too many requests", apierrors.NewTooManyRequests("busy", 1), true},
		{"server timeout", apierrors.NewServerTimeout(gr, "get", 1), true},
		{"internal error", apierrors.NewInternalError(errors.New("etcd")), true},
		{"conflict", apierrors.NewConflict(gr, "x", errors.New("changed")), true},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"EOF", fmt.Errorf("get: %w", io.ErrUnexpectedEOF), true},
		{"forbidden", apierrors.NewForbidden(gr, "x", errors.New("no")), false},
		{"unauthorized", apierrors.NewUnauthorized("bad certificate"), false},
		{"invalid", apierrors.NewBadRequest("bad"), false},
		{"not found", apierrors.NewNotFound(gr, "x"), false},
		{"not the API's", errors.New("kubeconfig: no such file"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transient(tc.err); got != tc.want {
				t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestRetry: transient errors are retried until f succeeds; a refusal ends
// at once; a window that passes ends with the last error.
func TestRetry(t *testing.T) {
	ctx := context.Background()
	calls := 0
	err := Retry(ctx, "publishing", time.Minute, func(context.Context) error {
		if calls++; calls < 3 {
			return apierrors.NewServiceUnavailable("starting")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("retry of a starting server: %v after %d calls, want success after 3", err, calls)
	}
	calls = 0
	err = Retry(ctx, "publishing", time.Minute, func(context.Context) error {
		calls++
		return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "x", errors.New("no"))
	})
	if !apierrors.IsForbidden(err) || calls != 1 || !strings.HasPrefix(err.Error(), "publishing: ") {
		t.Fatalf("retry of a refusal: %v after %d calls, want the refusal at once, named", err, calls)
	}
	err = Retry(ctx, "publishing", 600*time.Millisecond, func(context.Context) error {
		return apierrors.NewServiceUnavailable("starting")
	})
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("retry past its window: %v, want the last error", err)
	}
}
