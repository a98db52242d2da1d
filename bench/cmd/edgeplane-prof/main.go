// Command edgeplane-prof is edgeplane with runtime profiling for the
// benchmark's investigations; the real server has profiling off. It runs
// app.Main with the same arguments and, when asked through the environment,
// writes profiles to EDGEPLANE_PROF_DIR:
//
//	EDGEPLANE_PROF_CPU=5s       CPU profile of the first 5 s (cpu.pprof)
//	EDGEPLANE_PROF_CPU_AFTER=30s  start that CPU profile 30 s after start instead (under load)
//	EDGEPLANE_PROF_TRACE=3s     execution trace of the first 3 s (trace.out; go tool trace,
//	                            -pprof=sync|sched|net for where start-up waits)
//	EDGEPLANE_PROF_HEAP=60s,10m heap and goroutine profiles that long after start
//	                            (heap-60s.pprof, goroutine-60s.pprof, ...), each with the
//	                            runtime's memory statistics (memstats-60s.txt) and every
//	                            goroutine's stack and creator (goroutine-60s.txt, debug=2)
//	EDGEPLANE_FREE_AFTER=10s    an experiment: debug.FreeOSMemory() that long after start,
//	EDGEPLANE_SET_GOGC=25       after first setting the GC percent to this (start-up keeps GOGC)
//
// Built by hand, not by make bench:
//
//	go build -ldflags "$(hack/ldflags.sh)" -o bench/bin/edgeplane-prof ./bench/cmd/edgeplane-prof
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/cmd/edgeplane/app"
)

func main() {
	dir := os.Getenv("EDGEPLANE_PROF_DIR")
	if dir == "" {
		dir = "."
	}
	if d, err := time.ParseDuration(os.Getenv("EDGEPLANE_PROF_CPU")); err == nil {
		after, _ := time.ParseDuration(os.Getenv("EDGEPLANE_PROF_CPU_AFTER"))
		time.AfterFunc(after, func() { profileCPU(dir, d) })
	}
	if d, err := time.ParseDuration(os.Getenv("EDGEPLANE_PROF_TRACE")); err == nil {
		traceFor(dir, d)
	}
	for _, s := range strings.Split(os.Getenv("EDGEPLANE_PROF_HEAP"), ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			continue
		}
		time.AfterFunc(d, func() { writeHeap(dir, s) })
	}
	if d, err := time.ParseDuration(os.Getenv("EDGEPLANE_FREE_AFTER")); err == nil {
		pct, gcErr := strconv.Atoi(os.Getenv("EDGEPLANE_SET_GOGC"))
		time.AfterFunc(d, func() {
			if gcErr == nil {
				debug.SetGCPercent(pct)
			}
			debug.FreeOSMemory()
		})
	}
	os.Exit(app.Main(os.Args[1:]))
}

func profileCPU(dir string, d time.Duration) {
	f, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err == nil && pprof.StartCPUProfile(f) == nil {
		time.AfterFunc(d, func() { pprof.StopCPUProfile(); f.Close() })
	}
}

func traceFor(dir string, d time.Duration) {
	f, err := os.Create(filepath.Join(dir, "trace.out"))
	if err == nil && trace.Start(f) == nil {
		time.AfterFunc(d, func() { trace.Stop(); f.Close() })
	}
}

func writeHeap(dir, name string) {
	runtime.GC()
	if f, err := os.Create(filepath.Join(dir, "heap-"+name+".pprof")); err == nil {
		_ = pprof.WriteHeapProfile(f)
		f.Close()
	}
	if f, err := os.Create(filepath.Join(dir, "goroutine-"+name+".pprof")); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(f, 0)
		f.Close()
	}
	// debug=2 is the only form that names each goroutine's creator ("created by").
	if f, err := os.Create(filepath.Join(dir, "goroutine-"+name+".txt")); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(f, 2)
		f.Close()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	const mib = 1 << 20
	stats := fmt.Sprintf("HeapAlloc %.1f MiB\nHeapInuse %.1f MiB\nHeapIdle %.1f MiB\nHeapReleased %.1f MiB\nHeapSys %.1f MiB\n"+
		"StackInuse %.1f MiB\nMSpanInuse %.1f MiB\nGCSys %.1f MiB\nOtherSys %.1f MiB\nSys %.1f MiB\nNumGC %d\nGoroutines %d\n",
		float64(m.HeapAlloc)/mib, float64(m.HeapInuse)/mib, float64(m.HeapIdle)/mib, float64(m.HeapReleased)/mib, float64(m.HeapSys)/mib,
		float64(m.StackInuse)/mib, float64(m.MSpanInuse)/mib, float64(m.GCSys)/mib, float64(m.OtherSys)/mib, float64(m.Sys)/mib,
		m.NumGC, runtime.NumGoroutine())
	_ = os.WriteFile(filepath.Join(dir, "memstats-"+name+".txt"), []byte(stats), 0o644)
}
