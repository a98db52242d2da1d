// Command bench runs edgeplane and the upstream baseline (kube-apiserver +
// etcd as kubeadm runs them, and kube-apiserver on kine) side by side on
// loopback and reports start-up time, memory, request throughput, watch
// latency, idle disk writes and binary size, with edgeplane/baseline ratios.
// bench/run.sh builds the binaries and runs it; see docs/PERFORMANCE.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edgeplane/edgeplane/internal/pagecache"
	"github.com/edgeplane/edgeplane/internal/procfs"
)

type options struct {
	binDir, outDir, results string
	configs                 []configuration
	baseline                string
	repeat                  int
	settle                  time.Duration
	idle, idleSettle        time.Duration
	creates, clients, paced int
	env, edgeplaneArgs      multiFlag
	command                 string
	short, keep             bool
	keepPageCache           bool
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var names string
	fs.StringVar(&o.binDir, "bin", "bench/bin", "directory with edgeplane, kube-apiserver, etcd and kine")
	fs.StringVar(&o.outDir, "out", "bench/out", "directory for data dirs, logs and raw results")
	fs.StringVar(&o.results, "results", "", "markdown results file (default bench/RESULTS.md; with -short bench/out/RESULTS-short.md)")
	fs.StringVar(&names, "configs", defaultConfigs, "configurations to run, comma-separated; all: "+allNames())
	fs.StringVar(&o.baseline, "baseline", "upstream-etcd", "configuration the ratios divide by")
	fs.IntVar(&o.repeat, "repeat", 3, "cold and warm starts per configuration (medians are reported)")
	fs.DurationVar(&o.settle, "settle", 60*time.Second, "idle time after the first cold start before memory is read again")
	fs.DurationVar(&o.idle, "idle", 10*time.Minute, "idle window for disk writes (all configurations at once)")
	fs.DurationVar(&o.idleSettle, "idle-settle", 60*time.Second, "time after start before the idle window opens")
	fs.IntVar(&o.creates, "creates", 2000, "ConfigMaps to create")
	fs.IntVar(&o.clients, "clients", 8, "concurrent clients for the creates")
	fs.IntVar(&o.paced, "watch", 500, "paced writes for the watch latency at rest")
	fs.Var(&o.env, "env", "KEY=VALUE added to every server process's environment (repeatable), e.g. GOGC=50")
	fs.Var(&o.edgeplaneArgs, "edgeplane-arg", "extra argument for `edgeplane server` (repeatable)")
	fs.StringVar(&o.command, "cmd", "", "the command line to record in the results (run.sh sets it)")
	fs.BoolVar(&o.short, "short", false, "smoke run: 1 start each, 20 s settle, 1 min idle window, 500 creates, 50 paced writes")
	fs.BoolVar(&o.keep, "keep", false, "keep the data dirs after the run")
	fs.BoolVar(&o.keepPageCache, "keep-page-cache", false, "do not drop the binaries from the page cache before each configuration's first cold start")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		def("repeat", func() { o.repeat = 1 })
		def("settle", func() { o.settle = 20 * time.Second })
		def("idle", func() { o.idle = time.Minute })
		def("idle-settle", func() { o.idleSettle = 15 * time.Second })
		def("creates", func() { o.creates = 500 })
		def("watch", func() { o.paced = 50 })
		def("results", func() { o.results = filepath.Join(o.outDir, "RESULTS-short.md") })
	}
	if o.results == "" {
		o.results = "bench/RESULTS.md"
	}
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		c, ok := configByName(n)
		if !ok {
			return nil, fmt.Errorf("unknown configuration %q; known: %s", n, allNames())
		}
		o.configs = append(o.configs, c)
	}
	if len(o.configs) == 0 {
		return nil, fmt.Errorf("no configurations")
	}
	if o.repeat < 1 || o.clients < 1 || o.creates < 1 {
		return nil, fmt.Errorf("-repeat, -clients and -creates must be at least 1")
	}
	if o.command == "" {
		o.command = strings.Join(os.Args, " ")
	}
	return o, nil
}

func allNames() string {
	var n []string
	for _, c := range configurations {
		n = append(n, c.Name)
	}
	return strings.Join(n, ",")
}

func main() {
	if len(os.Args) > 1 && slices.Contains(os.Args[1:], "-serve") {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := serveMain(ctx, os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run is the whole benchmark.
type runner struct {
	o      *options
	runDir string
	// nodeDir holds the node configurations' data dirs: the kubelet's unix
	// sockets below <data-dir>/agent/kubelet must fit in 107 bytes, which
	// a data dir under a checkout's bench/out does not.
	nodeDir string
	results map[string]*configResult
	mu      sync.Mutex
	live    map[*instance]bool // running instances, stopped on interrupt
}

func run(ctx context.Context, o *options) error {
	began := time.Now()
	for _, c := range o.configs {
		for _, b := range c.binaries(o.binDir) {
			if _, err := os.Stat(b); err != nil {
				return fmt.Errorf("%s needs %s (run bench/run.sh, which builds it): %w", c.Name, b, err)
			}
		}
	}
	r := &runner{o: o, results: map[string]*configResult{}, live: map[*instance]bool{}}
	r.runDir = filepath.Join(o.outDir, "run-"+began.Format("20060102-150405"))
	r.nodeDir = filepath.Join(os.TempDir(), "epbench-"+began.Format("20060102-150405"))
	if err := os.MkdirAll(r.runDir, 0o755); err != nil {
		return err
	}
	rep := &report{Began: began, Machine: readMachine(r.runDir), Command: o.command, Baseline: o.baseline,
		Options: reportOptions{Repeat: o.repeat, Settle: o.settle, Idle: o.idle, IdleSettle: o.idleSettle,
			Creates: o.creates, Clients: o.clients, Paced: o.paced, Env: o.env, EdgeplaneArgs: o.edgeplaneArgs,
			DropPageCache: !o.keepPageCache}}
	for _, c := range o.configs {
		res := &configResult{Name: c.Name, About: c.About}
		res.Binaries, res.BinaryBytes = binaryInfo(c.binaries(o.binDir))
		r.results[c.Name] = res
		rep.Results = append(rep.Results, res)
	}
	logf("run dir %s; machine: %s", r.runDir, rep.Machine.summary())

	go func() {
		<-ctx.Done()
		r.mu.Lock()
		for in := range r.live {
			for _, p := range in.procs {
				_ = p.cmd.Process.Kill()
			}
		}
		r.mu.Unlock()
	}()

	// Phase A, one configuration at a time, interleaved by round so that
	// a change in the machine's load hits every configuration alike.
	for rep := 1; rep <= o.repeat; rep++ {
		for _, c := range o.configs {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.coldStart(ctx, c, rep)
		}
	}
	for rep := 1; rep <= o.repeat; rep++ {
		for _, c := range o.configs {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.warmStart(ctx, c, rep)
		}
	}
	// Phase B: every configuration idle at once.
	if o.idle > 0 {
		r.idleWindow(ctx)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep.Took = time.Since(began)
	rep.LoadEnd = procfs.LoadAvg()

	md := rep.markdown()
	fmt.Println()
	fmt.Println(md)
	if err := os.MkdirAll(filepath.Dir(o.results), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(o.results, []byte(md), 0o644); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(filepath.Join(r.runDir, "results.json"), js, 0o644); err != nil {
		return err
	}
	if !o.keep {
		for _, c := range o.configs {
			_ = os.RemoveAll(filepath.Join(r.runDir, c.Name, "data"))
		}
		_ = os.RemoveAll(r.nodeDir)
	}
	logf("results in %s and %s; took %s", o.results, filepath.Join(r.runDir, "results.json"), rep.Took.Round(time.Second))
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (r *runner) dataDir(c configuration, rep int) string {
	if c.Node {
		return filepath.Join(r.nodeDir, c.Name, fmt.Sprintf("%d", rep))
	}
	return filepath.Join(r.runDir, c.Name, "data", fmt.Sprintf("%d", rep))
}

func (r *runner) track(in *instance, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.live[in] = true
	} else {
		delete(r.live, in)
	}
}

// launch starts c on dir and waits until it is ready.
func (r *runner) launch(ctx context.Context, c configuration, dir, logs string) (*instance, startSample, error) {
	var s startSample
	s.Load1 = procfs.LoadAvg()
	in, err := start(c, r.o.binDir, dir, logs, r.o.env, r.extraArgs(c))
	if err != nil {
		return nil, s, err
	}
	r.track(in, true)
	ready, checks, err := in.waitReady(ctx, 3*time.Minute)
	if err != nil {
		r.stop(in)
		return nil, s, err
	}
	s.Ready = ready
	s.Checks = checks
	if s.Mem, err = in.memory(); err != nil {
		r.stop(in)
		return nil, s, err
	}
	if s.AllReady, err = in.waitAllReady(2*time.Minute, ready); err != nil {
		r.stop(in)
		return nil, s, err
	}
	return in, s, nil
}

func (r *runner) extraArgs(c configuration) []string {
	if c.Edgeplane {
		return append(slices.Clone(r.o.edgeplaneArgs), c.Args...)
	}
	return nil
}

func (r *runner) stop(in *instance) {
	if err := in.stop(); err != nil {
		logf("%s: %v", in.cfg.Name, err)
	}
	r.track(in, false)
}

// coldStart starts c on an empty data dir and runs the request benchmark on
// it; the first one also measures memory after the settle time before that.
func (r *runner) coldStart(ctx context.Context, c configuration, rep int) {
	res := r.results[c.Name]
	if res.Err != "" {
		return
	}
	dir := r.dataDir(c, rep)
	if err := prepare(c, dir); err != nil {
		res.Err = err.Error()
		return
	}
	if rep == 1 && !r.o.keepPageCache {
		cached, err := pagecache.Drop(c.binaries(r.o.binDir))
		if err != nil {
			res.Err = err.Error() + " (BENCH_ARGS='-bin DIR' on a disk filesystem, or -keep-page-cache)"
			return
		}
		res.PageCacheDropped = cached
	}
	logs := filepath.Join(r.runDir, c.Name, "logs", fmt.Sprintf("cold-%d", rep))
	in, s, err := r.launch(ctx, c, dir, logs)
	if err != nil {
		res.Err = fmt.Sprintf("cold start %d: %v", rep, err)
		logf("%s: %s", c.Name, res.Err)
		return
	}
	res.Cold = append(res.Cold, s)
	logf("%s cold %d: /readyz %.2f s, all ready %.2f s, RSS %s PSS %s (load %.2f)", c.Name, rep,
		s.Ready.Seconds(), s.AllReady.Seconds(), mib(s.Mem.RSS), mib(s.Mem.PSS), s.Load1)
	if rep == 1 {
		if c.Edgeplane {
			res.Timeline = parseTimeline(in.procs[0].logPath)
		}
		r.settleMemory(ctx, in, res)
	} else {
		select {
		case <-time.After(min(loadSettle, r.o.settle)):
		case <-ctx.Done():
		}
	}
	if ctx.Err() == nil && res.LoadErr == "" && res.Err == "" {
		r.load(ctx, in, res)
	}
	r.stop(in)
	if rep > 1 && !r.o.keep {
		_ = os.RemoveAll(dir)
	}
}

// settleMemory reads memory again after the settle time.
func (r *runner) settleMemory(ctx context.Context, in *instance, res *configResult) {
	select {
	case <-time.After(r.o.settle):
	case <-ctx.Done():
		return
	}
	m, err := in.memory()
	if err != nil {
		res.Err = err.Error()
		return
	}
	res.MemIdle = &idleMemory{After: r.o.settle, Mem: m, Load1: procfs.LoadAvg()}
	logf("%s after %s idle: RSS %s PSS %s", res.Name, r.o.settle, mib(m.RSS), mib(m.PSS))
}

// load runs the request benchmark on in; res.Load is the median over the
// cold starts so far.
func (r *runner) load(ctx context.Context, in *instance, res *configResult) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	lr, err := runLoad(lctx, in.rest, in.cpu, in.rss, r.o.creates, r.o.clients, r.o.paced)
	if err != nil {
		res.LoadErr = err.Error()
		logf("%s load: %v", res.Name, err)
		return
	}
	res.Loads = append(res.Loads, lr)
	m := medianLoad(res.Loads)
	res.Load = &m
	logf("%s load: %.0f creates/s (%.2f ms CPU each, %d errors), list %d in %s, watch p50/p99 paced %s/%s, under load %s/%s (load %.2f)",
		res.Name, lr.CreatesPerS, msf(lr.CPUPerCreate), lr.Errors, lr.ListItems, lr.ListMedian.Round(time.Millisecond),
		ms(lr.WatchP50), ms(lr.WatchP99), ms(lr.WatchLoadP50), ms(lr.WatchLoadP99), lr.Load1)
}

// warmStart restarts c on the data dir of its first cold start.
func (r *runner) warmStart(ctx context.Context, c configuration, rep int) {
	res := r.results[c.Name]
	if res.Err != "" {
		return
	}
	logs := filepath.Join(r.runDir, c.Name, "logs", fmt.Sprintf("warm-%d", rep))
	in, s, err := r.launch(ctx, c, r.dataDir(c, 1), logs)
	if err != nil {
		res.Err = fmt.Sprintf("warm start %d: %v", rep, err)
		logf("%s: %s", c.Name, res.Err)
		return
	}
	res.Warm = append(res.Warm, s)
	logf("%s warm %d: /readyz %.2f s, all ready %.2f s, RSS %s (load %.2f)", c.Name, rep,
		s.Ready.Seconds(), s.AllReady.Seconds(), mib(s.Mem.RSS), s.Load1)
	r.stop(in)
}

// idleWindow starts every configuration on its first data dir, lets them
// settle, then measures what each writes to disk while idle.
func (r *runner) idleWindow(ctx context.Context) {
	type running struct {
		in     *instance
		res    *configResult
		before ioCounters
		twin   bool // the 5-minute-compaction twin: its figure goes to res.IdleCompact5m
	}
	var all []*running
	defer func() {
		for _, x := range all {
			r.stop(x.in)
		}
	}()
	for _, c := range r.o.configs {
		res := r.results[c.Name]
		if res.Err != "" {
			continue
		}
		logs := filepath.Join(r.runDir, c.Name, "logs", "idle")
		in, _, err := r.launch(ctx, c, r.dataDir(c, 1), logs)
		if err != nil {
			res.Err = fmt.Sprintf("idle start: %v", err)
			logf("%s: %s", c.Name, res.Err)
			continue
		}
		all = append(all, &running{in: in, res: res})
		if !c.Edgeplane {
			continue
		}
		// The same configuration at upstream's compaction interval, side
		// by side, on a fresh data dir of its own.
		tw := idleCompactionTwin(c)
		dir := r.dataDir(tw, 1)
		if err := prepare(tw, dir); err != nil {
			res.Err = fmt.Sprintf("idle start of %s: %v", tw.Name, err)
			continue
		}
		in, _, err = r.launch(ctx, tw, dir, filepath.Join(r.runDir, tw.Name, "logs", "idle"))
		if err != nil {
			res.Err = fmt.Sprintf("idle start of %s: %v", tw.Name, err)
			logf("%s: %s", c.Name, res.Err)
			continue
		}
		all = append(all, &running{in: in, res: res, twin: true})
	}
	if len(all) == 0 {
		return
	}
	logf("idle: %d configurations up; settling %s, then a %s window", len(all), r.o.idleSettle, r.o.idle)
	select {
	case <-time.After(r.o.idleSettle):
	case <-ctx.Done():
		return
	}
	load0 := procfs.LoadAvg()
	t0 := time.Now()
	// A counter that cannot be read now would make the window's figure
	// count everything since start-up: that configuration has no idle figure.
	var measured []*running
	for _, x := range all {
		before, err := x.in.counters()
		if err != nil {
			x.res.Err = fmt.Sprintf("idle: reading the disk counters at the window's start: %v", err)
			logf("%s: %s", x.res.Name, x.res.Err)
			continue
		}
		x.before = before
		measured = append(measured, x)
	}
	end := t0.Add(r.o.idle)
	for time.Now().Before(end) {
		select {
		case <-time.After(min(time.Minute, time.Until(end))):
		case <-ctx.Done():
			return
		}
		if left := time.Until(end); left > time.Second {
			logf("idle: %s left (load %.2f)", left.Round(time.Second), procfs.LoadAvg())
		}
	}
	window := time.Since(t0)
	for _, x := range measured {
		after, err := x.in.counters()
		if err != nil {
			x.res.Err = fmt.Sprintf("idle: %v", err)
			continue
		}
		m, _ := x.in.memory()
		d := after.sub(x.before)
		idle := &idleResult{
			Window: window, Written: d.WriteBytes, Cancelled: d.CancelledWriteBytes, WChar: d.WChar, CPU: d.CPU,
			MemEnd: m, Load1Start: load0, Load1End: procfs.LoadAvg(), DiskBytes: dirSize(x.in.dataDir),
		}
		name := x.res.Name
		if x.twin {
			x.res.IdleCompact5m = idle
			name += " (compaction every " + upstreamCompaction + ")"
		} else {
			x.res.Idle = idle
		}
		logf("%s idle: %s written (%.1f MB/h), CPU %.2f%%, RSS %s", name, mb(d.WriteBytes),
			idle.perHour(), idle.cpuPercent(), mib(m.RSS))
	}
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
func mb(b int64) string  { return fmt.Sprintf("%.2f MB", float64(b)/1e6) }
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}
