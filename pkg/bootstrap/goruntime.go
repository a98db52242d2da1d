package bootstrap

import (
	"context"
	"os"
	"runtime/debug"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/preflight"
)

const (
	// defaultGCPercent trades a little idle CPU for memory: measured on the
	// whole control plane (SQLite, 45 s idle), GOGC=50 holds RSS at 290 MiB
	// against 326 MiB at Go's default of 100 (GOGC=25: 276 MiB).
	defaultGCPercent = 50
	// minMemoryLimit keeps the soft limit well above the process's natural
	// size (~170-200 MiB of heap): a limit below it makes the GC run non-stop.
	minMemoryLimit = 512 << 20
)

// tuneGoRuntime sets GOGC and a GOMEMLIMIT ceiling (half the memory this
// process may use, at least 512 MiB) unless the user set them.
func tuneGoRuntime(ctx context.Context) {
	gcPercent, limit := goRuntimeSettings(os.Getenv("GOGC") != "", os.Getenv("GOMEMLIMIT") != "", preflight.HostMemory())
	if gcPercent > 0 {
		debug.SetGCPercent(gcPercent)
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	klog.FromContext(ctx).V(1).Info("Go runtime", "gcPercent", gcPercent, "memoryLimit", limit)
}

// goRuntimeSettings decides GOGC and the memory limit (0 = leave as is).
func goRuntimeSettings(gogcSet, limitSet bool, hostMemory uint64) (gcPercent int, limit int64) {
	if !gogcSet {
		gcPercent = defaultGCPercent
	}
	if !limitSet && hostMemory > 0 {
		l := max(hostMemory/2, minMemoryLimit)
		limit = int64(min(l, hostMemory))
	}
	return gcPercent, limit
}
