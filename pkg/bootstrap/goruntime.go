package bootstrap

import (
	"context"
	"os"
	"runtime/debug"

	"k8s.io/klog/v2"
)

const (
	// defaultGCPercent (the default profile's) trades a little idle CPU for
	// memory: measured on the whole control plane (SQLite, 60 s idle), GOGC=50
	// holds RSS ~35 MiB under Go's default of 100 with no start-up cost
	// (docs/PERFORMANCE.md); the small profile uses 25.
	defaultGCPercent = 50
	// minMemoryLimit keeps the soft limit well above the process's natural
	// size (~170-200 MiB of heap): a limit below it makes the GC run non-stop.
	minMemoryLimit = 512 << 20
)

// tuneGoRuntime sets GOGC (the profile's) and a GOMEMLIMIT ceiling (half the
// memory this process may use, at least 512 MiB) unless the user set them.
func tuneGoRuntime(ctx context.Context, profileGCPercent int, hostMemory uint64) {
	gcPercent, limit := goRuntimeSettings(os.Getenv("GOGC") != "", os.Getenv("GOMEMLIMIT") != "", profileGCPercent, hostMemory)
	if gcPercent > 0 {
		debug.SetGCPercent(gcPercent)
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	klog.FromContext(ctx).V(1).Info("Go runtime", "gcPercent", gcPercent, "memoryLimit", limit)
}

// goRuntimeSettings decides GOGC and the memory limit (0 = leave as is).
func goRuntimeSettings(gogcSet, limitSet bool, profileGCPercent int, hostMemory uint64) (gcPercent int, limit int64) {
	if !gogcSet {
		gcPercent = profileGCPercent
	}
	if !limitSet && hostMemory > 0 {
		l := max(hostMemory/2, minMemoryLimit)
		limit = int64(min(l, hostMemory))
	}
	return gcPercent, limit
}
