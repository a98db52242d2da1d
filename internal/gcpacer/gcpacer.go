// Package gcpacer lets the Go heap grow up to a ceiling while the process
// allocates fast (a burst of API requests) and puts the GC percent back,
// returning the memory to the host, once the burst is over.
//
// A low GC percent keeps an idle control plane small, but under a burst it
// makes the collector run every few hundred milliseconds; each cycle's mark
// phase takes a share of the CPU and slows the goroutines that allocate,
// which shows as a tail in request and watch latency. docs/PERFORMANCE.md has
// the figures.
package gcpacer

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// Defaults of Config's optional fields.
const (
	// DefaultInterval is short because a burst must be seen before its
	// first GC cycle: at GOGC=50 that comes after ~50 MB, 0.3 s of a burst
	// of creates. A sample is one read of five runtime metrics (~0.6 us).
	DefaultInterval       = 50 * time.Millisecond
	DefaultBusyGCInterval = 2 * time.Second
	DefaultCalmSamples    = 40
	DefaultMaxPercent     = 400
)

// Config says how far a burst may grow the heap.
type Config struct {
	// BasePercent is the GC percent outside bursts (GOGC).
	BasePercent int
	// BurstHeap is the heap goal a burst may use: the burst's GC percent is
	// the one whose goal is BurstHeap for the current live heap, within
	// [BasePercent, MaxPercent]. A live heap whose base goal already reaches
	// it gets the base percent: the pacer never adds memory above BurstHeap.
	// 0 turns the pacer off.
	BurstHeap uint64
	// RSSCeiling, when set, bounds the burst further: the heap may grow only
	// by what the process's resident memory (heap, stacks, the binary's and
	// the datastore's mapped pages) may still grow below it. At the ceiling
	// the heap stops growing, down to the base percent.
	RSSCeiling uint64
	// MaxPercent caps the burst's GC percent (0: DefaultMaxPercent).
	MaxPercent int
	// Interval is how often the allocation rate is sampled (0: DefaultInterval).
	Interval time.Duration
	// BusyGCInterval: a burst is an allocation rate at which the base percent
	// would start a GC cycle more often than this (0: DefaultBusyGCInterval).
	BusyGCInterval time.Duration
	// CalmSamples is how many samples in a row below that rate end a burst
	// (0: DefaultCalmSamples).
	CalmSamples int
}

func (c Config) withDefaults() Config {
	if c.MaxPercent <= 0 {
		c.MaxPercent = DefaultMaxPercent
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.BusyGCInterval <= 0 {
		c.BusyGCInterval = DefaultBusyGCInterval
	}
	if c.CalmSamples <= 0 {
		c.CalmSamples = DefaultCalmSamples
	}
	return c
}

// sample is what one reading of the runtime's metrics says.
type sample struct {
	allocated uint64        // bytes allocated since the previous sample
	live      uint64        // heap live after the last GC cycle
	heap      uint64        // heap memory the process holds: objects, and spans not returned to the host
	rss       uint64        // the process's resident memory (read only when busy; 0: unknown)
	elapsed   time.Duration // since the previous sample
}

// action is what the pacer does after a sample.
type action struct {
	setPercent int  // the GC percent to set; 0: leave it
	collect    bool // collect now and return the freed memory to the host
	atCeiling  bool // back to the base percent while still busy: no room left
}

// pacer decides; Run reads the metrics and applies its actions.
type pacer struct {
	cfg     Config
	percent int // the GC percent in force
	calm    int // samples below the busy rate in a row, during a burst
}

func newPacer(cfg Config) *pacer {
	cfg = cfg.withDefaults()
	return &pacer{cfg: cfg, percent: cfg.BasePercent}
}

func (p *pacer) bursting() bool { return p.percent != p.cfg.BasePercent }

// busy reports whether s's allocation rate would start a GC cycle at the base
// percent within BusyGCInterval.
func (p *pacer) busy(s sample) bool {
	if s.elapsed <= 0 || s.live == 0 {
		return false
	}
	runway := float64(s.live) * float64(p.cfg.BasePercent) / 100
	perInterval := float64(s.allocated) * float64(p.cfg.BusyGCInterval) / float64(s.elapsed)
	return perInterval > runway
}

// burstPercent is the GC percent whose heap goal is BurstHeap at s.live, or
// less if the RSS ceiling leaves less room: the heap may grow by what the
// resident memory may still grow (both grow together, so this goal holds
// still while a burst fills it).
func (p *pacer) burstPercent(s sample) int {
	goal := p.cfg.BurstHeap
	if p.cfg.RSSCeiling > 0 && s.rss > 0 {
		room := uint64(0)
		if s.rss < p.cfg.RSSCeiling {
			room = p.cfg.RSSCeiling - s.rss
		}
		goal = min(goal, s.heap+room)
	}
	if s.live == 0 || s.live >= goal {
		return p.cfg.BasePercent
	}
	pct := int((goal - s.live) * 100 / s.live)
	return min(max(pct, p.cfg.BasePercent), p.cfg.MaxPercent)
}

// step takes one sample and returns what to do.
func (p *pacer) step(s sample) action {
	if p.busy(s) {
		p.calm = 0
		want := p.burstPercent(s)
		// Follow the live heap, but not every small rise; a fall (the
		// ceilings leave less room) is taken at once.
		if want < p.percent || (want > p.percent && (!p.bursting() || (want-p.percent)*10 > p.percent)) {
			p.percent = want
			return action{setPercent: want, atCeiling: want == p.cfg.BasePercent}
		}
		return action{}
	}
	if !p.bursting() {
		return action{}
	}
	p.calm++
	if p.calm < p.cfg.CalmSamples {
		return action{}
	}
	p.calm = 0
	p.percent = p.cfg.BasePercent
	// The runtime returns memory to the host down to ~10% over the heap goal,
	// and the goal falls only at the next GC cycle, which may be two minutes
	// away on an idle server. A heap the burst grew past that is collected
	// and returned now.
	goal := s.live + s.live*uint64(p.cfg.BasePercent)/100
	return action{setPercent: p.cfg.BasePercent, collect: s.heap > goal+goal/10}
}

// Run samples the allocation rate every Interval and sets the GC percent
// until ctx ends, then puts the base percent back. It assumes the GC percent
// is BasePercent when it starts.
func Run(ctx context.Context, cfg Config) {
	if cfg.BurstHeap == 0 || cfg.BasePercent <= 0 {
		return
	}
	logger := klog.FromContext(ctx)
	p := newPacer(cfg)
	samples := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	read := func() (allocs, live, heap uint64) {
		metrics.Read(samples)
		return uint64Value(samples[0]), uint64Value(samples[1]),
			uint64Value(samples[2]) + uint64Value(samples[3]) + uint64Value(samples[4])
	}
	prevAllocs, _, _ := read()
	prev := time.Now()
	var burstStart time.Time
	peak := 0

	ticker := time.NewTicker(p.cfg.Interval)
	defer ticker.Stop()
	defer func() {
		if p.bursting() {
			debug.SetGCPercent(p.cfg.BasePercent)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			allocs, live, heap := read()
			wasBursting := p.bursting()
			s := sample{allocated: allocs - prevAllocs, live: live, heap: heap, elapsed: now.Sub(prev)}
			if p.cfg.RSSCeiling > 0 && p.busy(s) {
				if v, err := procfs.RSS(os.Getpid()); err == nil {
					s.rss = uint64(v)
				}
			}
			a := p.step(s)
			prevAllocs, prev = allocs, now
			if a.setPercent == 0 {
				continue
			}
			debug.SetGCPercent(a.setPercent)
			if !wasBursting {
				burstStart, peak = now, 0
			}
			peak = max(peak, a.setPercent)
			if a.collect {
				debug.FreeOSMemory() // a full collection, then the freed pages go back
			}
			switch {
			case a.atCeiling:
				logger.V(2).Info("GC percent back to base during an allocation burst: no room below the ceilings",
					"burst", time.Since(burstStart).Round(time.Millisecond), "heapMiB", heap>>20, "rssMiB", s.rss>>20)
			case !p.bursting():
				logger.V(2).Info("Allocation burst over: GC percent back to base",
					"burst", time.Since(burstStart).Round(time.Millisecond), "burstGCPercent", peak,
					"gcPercent", a.setPercent, "heapMiB", heap>>20, "liveHeapMiB", live>>20, "collected", a.collect)
			}
		}
	}
}

func uint64Value(s metrics.Sample) uint64 {
	if s.Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s.Value.Uint64()
}
