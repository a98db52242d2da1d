package bootstrap

import (
	"context"
	"os"
	"runtime/debug"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/gcpacer"
	"github.com/edgeplane/edgeplane/internal/procfs"
)

const (
	// defaultGCPercent (the default profile's) trades a little idle CPU for
	// memory: measured on the whole control plane (SQLite, 60 s idle), GOGC=50
	// holds RSS ~35 MiB under Go's default of 100 with no start-up cost
	// (docs/PERFORMANCE.md); the small profile uses 25.
	defaultGCPercent = 50
	// agentGCPercent is an agent's GOGC: an agent has no profile and no
	// allocation bursts of a control plane; measured with 10 pods
	// (docs/PERFORMANCE.md, "An agent's memory").
	agentGCPercent = 50
	// defaultBurstHeap is the heap an allocation burst may grow to
	// (internal/gcpacer): at GOGC=50 a burst of creates ran a GC cycle every
	// ~0.3 s, and each one stalled the watch events in flight
	// (docs/PERFORMANCE.md). ~3.5 times the idle live heap (~100 MiB).
	defaultBurstHeap = 384 << 20
	// defaultBurstRSSCeiling stops that growth well below the 600 MiB the
	// default profile may use under load (docs/reliability/load.md): stacks,
	// mapped pages and the heap between two samples grow too (560 let
	// TestLoad peak at 603 MiB, 480 at 588-602 MiB: a percent is relative to
	// a live heap that the burst grows too; 400: 477-479 MiB); on embedded
	// etcd a long churn alone reaches ~600 MiB, and then bursts get no more
	// heap. A runtime memory limit at the ceiling was tried instead and made
	// the collector spin at it (docs/PERFORMANCE.md).
	defaultBurstRSSCeiling = 400 << 20
	// minMemoryLimit keeps the soft limit well above the process's natural
	// size (~170-200 MiB of heap): a limit below it makes the GC run non-stop.
	minMemoryLimit = 512 << 20
	// codeReserve is the memory kept out of the Go runtime's reach on a host
	// (or under a cgroup limit) smaller than 2 × minMemoryLimit: the binary's
	// code and read-only data that a running server keeps mapped (file-backed
	// RSS 38-51 MiB in the 256 MiB board run, docs/PERFORMANCE.md). Memory the
	// heap takes from it the kernel takes back from the code, which then
	// faults in again from disk, thousands of pages a minute, while the
	// collector would have freed the heap for a little CPU.
	codeReserve = 64 << 20
	// startupPagesDelay is how long after ready the binary's start-up pages
	// are released: by then the one-off start-up work (informers' first
	// lists, the controllers' first sync, the OpenAPI aggregation) is done.
	startupPagesDelay = 30 * time.Second
)

// tuneGoRuntime sets GOGC (the profile's) and a GOMEMLIMIT ceiling
// (memoryLimit: half the memory this process may use, at least 512 MiB, but
// on a small host or cgroup its memory less codeReserve) unless the user set
// them.
// It returns the GC percent it set (0: the user's GOGC stands).
func tuneGoRuntime(ctx context.Context, profileGCPercent int, hostMemory uint64) int {
	gcPercent, limit := goRuntimeSettings(os.Getenv("GOGC") != "", os.Getenv("GOMEMLIMIT") != "", profileGCPercent, hostMemory)
	if gcPercent > 0 {
		debug.SetGCPercent(gcPercent)
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	klog.FromContext(ctx).V(1).Info("Go runtime", "gcPercent", gcPercent, "memoryLimit", limit)
	return gcPercent
}

// goRuntimeSettings decides GOGC and the memory limit (0 = leave as is).
func goRuntimeSettings(gogcSet, limitSet bool, profileGCPercent int, hostMemory uint64) (gcPercent int, limit int64) {
	if !gogcSet {
		gcPercent = profileGCPercent
	}
	if !limitSet && hostMemory > 0 {
		limit = int64(memoryLimit(hostMemory))
	}
	return gcPercent, limit
}

// memoryLimit is the soft memory limit for a host (or cgroup) of hostMemory
// bytes: half of it, at least minMemoryLimit, and never more than hostMemory
// less codeReserve (or, below 2 × codeReserve, half of it).
func memoryLimit(hostMemory uint64) uint64 {
	if hostMemory <= 2*codeReserve {
		return hostMemory / 2
	}
	return max(hostMemory/2, min(minMemoryLimit, hostMemory-codeReserve))
}

// burstRSSCeiling is the resident memory at which the GC pacer stops letting
// an allocation burst grow the heap: the profile's, and on a host smaller
// than that the soft memory limit (0 when unknown: the profile's).
func burstRSSCeiling(profileCeiling, hostMemory uint64) uint64 {
	if hostMemory == 0 {
		return profileCeiling
	}
	return min(profileCeiling, memoryLimit(hostMemory))
}

// paceGC runs the GC pacer (internal/gcpacer) until shutdown; it is off when
// the user set GOGC (pacer.BasePercent is then 0).
func paceGC(ctx context.Context, pacer gcpacer.Config) {
	gcpacer.Run(klog.NewContext(ctx, klog.FromContext(ctx).WithName("gc-pacer")), pacer)
}

// releaseStartupPagesAfter waits delay (or shutdown), then releases the
// binary's pages that only start-up used (releaseStartupPages): the
// ~110-140 MiB of the binary that start-up maps shrinks to the ~50-80 MiB the
// running control plane touches again (docs/PERFORMANCE.md).
func releaseStartupPagesAfter(ctx context.Context, delay time.Duration) {
	logger := klog.FromContext(ctx)
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	logger = logger.V(1)
	var before int64
	if logger.Enabled() { // /proc is read only for the log line
		before, _ = procfs.StatusBytes(os.Getpid(), "RssFile")
	}
	released, err := releaseStartupPages()
	if err != nil {
		logger.Info("Not releasing the binary's start-up pages", "err", err)
		return
	}
	logger.Info("Released the binary's start-up pages", "mappedMiB", released>>20, "residentMiBBefore", before>>20)
}
