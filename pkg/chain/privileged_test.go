package chain

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/capabilities"
)

// TestAllowPrivilegedSetFirst: upstream's API server validates pods with a
// process-wide setting that the first setter fixes, and sets it itself
// while it is built. When something in the process set it before (a
// kubelet started first, a pod validated early), the chain refuses to start
// rather than validate with a setting it was not given.
func TestAllowPrivilegedSetFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a real chain on kine")
	}
	ctx := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0))))
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	env := newChainEnv(t, ctx)

	capabilities.ResetForTest()
	t.Cleanup(capabilities.ResetForTest)
	capabilities.Setup(false, 0) // as upstream's kubelet or a validation would, first
	s, _ := env.newServer(t, filepath.Join(t.TempDir(), "config"), func(c *Config) { c.AllowPrivileged = true })
	err := s.Start(ctx)
	t.Cleanup(func() {
		stopCtx, c := context.WithTimeout(context.Background(), time.Minute)
		defer c()
		_ = s.Stop(stopCtx)
	})
	want := "privileged containers are to be allowed, but this process has them refused already"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Start: %v, want %q", err, want)
	}
}
