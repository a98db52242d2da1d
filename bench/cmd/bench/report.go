package main

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// startSample is one start: exec to /readyz 200 and to every component ready.
type startSample struct {
	Ready, AllReady time.Duration
	Mem             memory // right after /readyz returned 200
	Load1           float64
	Checks          checkTimes
}

type idleMemory struct {
	After time.Duration
	Mem   memory
	Load1 float64
}

type idleResult struct {
	Window                    time.Duration
	Written, Cancelled, WChar int64
	CPU                       time.Duration
	MemEnd                    memory
	Load1Start, Load1End      float64
	DiskBytes                 int64 // the data dir at the end
}

func (i *idleResult) perHour() float64 {
	return float64(i.Written) / 1e6 * float64(time.Hour) / float64(i.Window)
}

func (i *idleResult) cpuPercent() float64 {
	return 100 * float64(i.CPU) / float64(i.Window)
}

type binary struct {
	Path     string
	Bytes    int64
	Stripped bool
}

type phase struct {
	Name     string
	Duration string
}

type configResult struct {
	Name, About string
	Binaries    []binary
	BinaryBytes int64
	Cold, Warm  []startSample
	Timeline    []phase // edgeplane's "Start-up phase done" lines, first cold start
	// PageCacheDropped is how much of the binaries was in the page cache
	// when it was dropped before the first cold start.
	PageCacheDropped int64
	MemIdle          *idleMemory
	Loads            []loadResult // the request benchmark of each cold start
	Load             *loadResult  // their medians
	LoadErr          string
	Idle             *idleResult
	// IdleCompact5m is an edgeplane configuration's idle window at
	// upstream's 5-minute compaction interval (edgeplane's default is 15).
	IdleCompact5m *idleResult
	Err           string
}

type machine struct {
	CPUs        int
	CPUModel    string
	MemoryBytes int64
	Kernel      string
	GoVersion   string
	Filesystem  string
	Load1       float64
}

func (m machine) summary() string {
	return fmt.Sprintf("%d CPUs (%s), %.1f GiB RAM, Linux %s, %s; load average (1 min) %.2f at start",
		m.CPUs, m.CPUModel, float64(m.MemoryBytes)/(1<<30), m.Kernel, m.Filesystem, m.Load1)
}

type reportOptions struct {
	Repeat                   int
	Settle, Idle, IdleSettle time.Duration
	Creates, Clients, Paced  int
	Env, EdgeplaneArgs       []string
	DropPageCache            bool
}

type report struct {
	Began    time.Time
	Took     time.Duration
	Machine  machine
	LoadEnd  float64
	Command  string
	Baseline string
	Options  reportOptions
	Results  []*configResult
}

func readMachine(dir string) machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Load1: procfs.LoadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for _, l := range strings.Split(string(b), "\n") {
			if _, err := fmt.Sscanf(l, "MemTotal: %d kB", &kb); err == nil {
				m.MemoryBytes = kb * 1024
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.Filesystem = filesystemOf(dir)
	return m
}

// filesystemOf names the filesystem type dir is on, from /proc/mounts.
func filesystemOf(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "?"
	}
	f, err := os.Open("/proc/mounts")
	if err != nil {
		return "?"
	}
	defer f.Close()
	best, typ := "", "?"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 3 {
			continue
		}
		mp := fl[1]
		if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best, typ = mp, fl[2]
		}
	}
	return typ + " at " + dir
}

func binaryInfo(paths []string) ([]binary, int64) {
	var bs []binary
	var total int64
	for _, p := range paths {
		b := binary{Path: p}
		if fi, err := os.Stat(p); err == nil {
			b.Bytes = fi.Size()
			total += b.Bytes
		}
		if f, err := elf.Open(p); err == nil {
			b.Stripped = f.Section(".symtab") == nil
			f.Close()
		}
		bs = append(bs, b)
	}
	return bs, total
}

var phaseRE = regexp.MustCompile(`"Start-up phase done".* phase="([^"]+)" duration="([^"]+)"`)

// parseTimeline reads edgeplane's start-up phases from its log.
func parseTimeline(path string) []phase {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var ps []phase
	for _, l := range strings.Split(string(b), "\n") {
		if m := phaseRE.FindStringSubmatch(l); m != nil {
			ps = append(ps, phase{m[1], m[2]})
		}
	}
	return ps
}

// median is the median of f over s (the mean of the middle two of an even
// count), with the smallest and largest value.
func median[S any](s []S, f func(S) float64) (float64, float64, float64, bool) {
	if len(s) == 0 {
		return 0, 0, 0, false
	}
	v := make([]float64, len(s))
	for i, x := range s {
		v[i] = f(x)
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + m) / 2
	}
	return m, v[0], v[len(v)-1], true
}

// row is one line of the results table.
type row struct {
	label  string
	unit   string
	format string
	value  func(*configResult) (float64, bool)
	higher bool // higher is better
	// note marks a cell whose figure hides a failure (errors, missed events).
	note func(*configResult) string
}

// loadNote marks the load figures of a configuration whose requests failed.
func loadNote(r *configResult) string {
	if r.Load != nil && r.Load.Errors > 0 {
		return fmt.Sprintf(" ⚠ %d errors", r.Load.Errors)
	}
	return ""
}

// watchNote marks the during-the-creates watch figures of a configuration
// whose watch missed events.
func watchNote(r *configResult) string {
	if r.Load != nil && r.Load.WatchLoadMissed > 0 {
		return fmt.Sprintf(" ⚠ %d missed", r.Load.WatchLoadMissed)
	}
	return ""
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func mibf(b int64) float64        { return float64(b) / (1 << 20) }
func medianOf[S any](s []S, f func(S) float64) (float64, bool) {
	v, _, _, ok := median(s, f)
	return v, ok
}

func (rep *report) rows() []row {
	load := func(f func(*loadResult) float64) func(*configResult) (float64, bool) {
		return func(r *configResult) (float64, bool) {
			if r.Load == nil || r.LoadErr != "" {
				return 0, false
			}
			return f(r.Load), true
		}
	}
	o := rep.Options
	return []row{
		{label: "processes", format: "%.0f", value: func(r *configResult) (float64, bool) { return float64(len(r.Binaries)), true }},
		{label: "stripped binaries", unit: "MB", format: "%.1f", value: func(r *configResult) (float64, bool) { return float64(r.BinaryBytes) / 1e6, true }},
		{label: "cold start: exec to /readyz 200", unit: "s", format: "%.2f", value: func(r *configResult) (float64, bool) {
			return medianOf(r.Cold, func(s startSample) float64 { return s.Ready.Seconds() })
		}},
		{label: "warm start: exec to /readyz 200", unit: "s", format: "%.2f", value: func(r *configResult) (float64, bool) {
			return medianOf(r.Warm, func(s startSample) float64 { return s.Ready.Seconds() })
		}},
		{label: "cold start: exec to every component ready", unit: "s", format: "%.2f", value: func(r *configResult) (float64, bool) {
			if c, ok := configByName(r.Name); !ok || !(c.Edgeplane || c.Controllers) {
				return 0, false
			}
			return medianOf(r.Cold, func(s startSample) float64 { return s.AllReady.Seconds() })
		}},
		{label: "RSS at ready", unit: "MiB", format: "%.0f", value: func(r *configResult) (float64, bool) {
			return medianOf(r.Cold, func(s startSample) float64 { return mibf(s.Mem.RSS) })
		}},
		{label: "PSS at ready", unit: "MiB", format: "%.0f", value: func(r *configResult) (float64, bool) {
			return medianOf(r.Cold, func(s startSample) float64 { return mibf(s.Mem.PSS) })
		}},
		{label: fmt.Sprintf("RSS at the end of the idle window (steady state: %s settling + %s)", o.IdleSettle, o.Idle), unit: "MiB", format: "%.0f", value: func(r *configResult) (float64, bool) {
			if r.Idle == nil {
				return 0, false
			}
			return mibf(r.Idle.MemEnd.RSS), true
		}},
		{label: fmt.Sprintf("RSS after %s idle (just after edgeplane releases its start-up pages, 30 s after ready)", o.Settle), unit: "MiB", format: "%.0f", value: func(r *configResult) (float64, bool) {
			if r.MemIdle == nil {
				return 0, false
			}
			return mibf(r.MemIdle.Mem.RSS), true
		}},
		{label: fmt.Sprintf("PSS after %s idle", o.Settle), unit: "MiB", format: "%.0f", value: func(r *configResult) (float64, bool) {
			if r.MemIdle == nil {
				return 0, false
			}
			return mibf(r.MemIdle.Mem.PSS), true
		}},
		{label: fmt.Sprintf("%d ConfigMap creates, %d clients", o.Creates, o.Clients), unit: "creates/s", format: "%.0f", higher: true,
			value: load(func(l *loadResult) float64 { return l.CreatesPerS }), note: loadNote},
		{label: "create errors (all cold starts; creates/s counts successes only)", format: "%.0f",
			value: load(func(l *loadResult) float64 { return float64(l.Errors) }), note: loadNote},
		{label: "server CPU per create (all processes)", unit: "ms", format: "%.2f", value: load(func(l *loadResult) float64 { return msf(l.CPUPerCreate) })},
		{label: "peak RSS during the creates", unit: "MiB", format: "%.0f", value: load(func(l *loadResult) float64 { return mibf(l.PeakRSS) })},
		{label: "create latency p50", unit: "ms", format: "%.1f", value: load(func(l *loadResult) float64 { return msf(l.CreateP50) })},
		{label: "create latency p99", unit: "ms", format: "%.1f", value: load(func(l *loadResult) float64 { return msf(l.CreateP99) })},
		{label: fmt.Sprintf("list all %d (median of %d)", o.Creates, listRepeats), unit: "ms", format: "%.0f", value: load(func(l *loadResult) float64 { return msf(l.ListMedian) })},
		{label: "watch, paced writes: response to event p50", unit: "ms", format: "%.2f", value: load(func(l *loadResult) float64 { return msf(l.WatchP50) })},
		{label: "watch, paced writes: response to event p99", unit: "ms", format: "%.2f", value: load(func(l *loadResult) float64 { return msf(l.WatchP99) })},
		{label: "watch, paced writes: request to event p50", unit: "ms", format: "%.2f", value: load(func(l *loadResult) float64 { return msf(l.WatchE2EP50) })},
		{label: "watch, paced writes: request to event p99", unit: "ms", format: "%.2f", value: load(func(l *loadResult) float64 { return msf(l.WatchE2EP99) })},
		{label: "watch, during the creates: response to event p50", unit: "ms", format: "%.2f", value: load(func(l *loadResult) float64 { return msf(l.WatchLoadP50) }), note: watchNote},
		{label: "watch, during the creates: response to event p99", unit: "ms", format: "%.2f", value: load(func(l *loadResult) float64 { return msf(l.WatchLoadP99) }), note: watchNote},
		{label: "watch, during the creates: events never delivered (all cold starts; not in the percentiles)", format: "%.0f",
			value: load(func(l *loadResult) float64 { return float64(l.WatchLoadMissed) }), note: watchNote},
		{label: fmt.Sprintf("disk writes idle (%s window)", o.Idle), unit: "MB/h", format: "%.2f", value: func(r *configResult) (float64, bool) {
			if r.Idle == nil {
				return 0, false
			}
			return r.Idle.perHour(), true
		}},
		{label: "disk writes idle, compaction every " + upstreamCompaction + " as upstream's default", unit: "MB/h", format: "%.2f", value: func(r *configResult) (float64, bool) {
			if r.IdleCompact5m == nil {
				return 0, false
			}
			return r.IdleCompact5m.perHour(), true
		}},
		{label: "CPU idle", unit: "% of a core", format: "%.2f", value: func(r *configResult) (float64, bool) {
			if r.Idle == nil {
				return 0, false
			}
			return r.Idle.cpuPercent(), true
		}},
		{label: "data dir on disk after the run", unit: "MB", format: "%.1f", value: func(r *configResult) (float64, bool) {
			if r.Idle == nil {
				return 0, false
			}
			return float64(r.Idle.DiskBytes) / 1e6, true
		}},
	}
}

func (rep *report) baseline() *configResult {
	for _, r := range rep.Results {
		if r.Name == rep.Baseline {
			return r
		}
	}
	return nil
}

// table is the results table: a row per measure, a column per configuration,
// each non-baseline value followed by its ratio to the baseline.
func (rep *report) table() string {
	var b strings.Builder
	b.WriteString("| measure |")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, " %s |", r.Name)
	}
	b.WriteString("\n|---|")
	for range rep.Results {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	base := rep.baseline()
	for _, rw := range rep.rows() {
		label := rw.label
		if rw.unit != "" {
			label += " (" + rw.unit + ")"
		}
		fmt.Fprintf(&b, "| %s |", label)
		bv, bok := 0.0, false
		if base != nil {
			bv, bok = rw.value(base)
		}
		for _, r := range rep.Results {
			v, ok := rw.value(r)
			note := ""
			if ok && rw.note != nil {
				note = rw.note(r)
			}
			switch {
			case !ok:
				b.WriteString(" – |")
			case r == base || !bok || bv == 0:
				fmt.Fprintf(&b, " "+rw.format+"%s |", v, note)
			default:
				fmt.Fprintf(&b, " "+rw.format+" (%.2f×)%s |", v, v/bv, note)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func (rep *report) markdown() string {
	var b strings.Builder
	o := rep.Options
	m := rep.Machine
	fmt.Fprintf(&b, "# Benchmark results\n\n")
	fmt.Fprintf(&b, "- Date: %s (took %s)\n", rep.Began.UTC().Format("2006-01-02 15:04 MST"), rep.Took.Round(time.Second))
	fmt.Fprintf(&b, "- Machine: %d CPUs (%s), %.1f GiB RAM, Linux %s, %s, %s\n",
		m.CPUs, m.CPUModel, float64(m.MemoryBytes)/(1<<30), m.Kernel, m.GoVersion, m.Filesystem)
	fmt.Fprintf(&b, "- Load average (1 min): %.2f at the start, %.2f at the end (the machine is shared; per-measurement load is in the details)\n", m.Load1, rep.LoadEnd)
	fmt.Fprintf(&b, "- Command: `%s`\n", rep.Command)
	fmt.Fprintf(&b, "- Settings: %d cold and %d warm starts per configuration, interleaved (medians shown); memory re-read %s after the first cold start; "+
		"after every cold start (%s after it from the second on), %d ConfigMaps created by %d clients (one connection each), then %d paced writes for watch latency (each request figure is its median over the cold starts); "+
		"idle writes over %s after %s of settling, every configuration idle at once.\n",
		o.Repeat, o.Repeat, o.Settle, min(loadSettle, o.Settle), o.Creates, o.Clients, o.Paced, o.Idle, o.IdleSettle)
	if len(o.Env) > 0 || len(o.EdgeplaneArgs) > 0 {
		fmt.Fprintf(&b, "- Extra environment: `%s`; extra edgeplane arguments: `%s`\n", strings.Join(o.Env, " "), strings.Join(o.EdgeplaneArgs, " "))
	}
	if o.DropPageCache {
		b.WriteString("- Page cache: each configuration's binaries are dropped from the page cache before its first cold start, the one whose memory is reported, as after a boot " +
			"(how much of a binary's file a process maps depends on how the file entered the page cache; `-keep-page-cache` leaves it)\n")
	}
	fmt.Fprintf(&b, "- Ratios: configuration / %s; below 1 is better except for creates/s.\n\n", rep.Baseline)
	b.WriteString(rep.table())
	b.WriteString("\nConfigurations:\n\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "- `%s`: %s; %s.\n", r.Name, r.About, binaryList(r.Binaries))
		if r.Err != "" {
			fmt.Fprintf(&b, "  - FAILED: %s\n", firstLine(r.Err))
		}
		if r.LoadErr != "" {
			fmt.Fprintf(&b, "  - request benchmark FAILED: %s\n", firstLine(r.LoadErr))
		}
	}
	b.WriteString("\nHow each figure is taken: time from exec of the configuration's processes (all at once, as the kubelet starts kubeadm's static pods; " +
		"the upstream PKI is written beforehand, edgeplane creates its own) until `GET /readyz?verbose` with the admin client certificate returns 200, " +
		"polled every 20 ms. \"Every component ready\" is edgeplane's `edgeplane ready in` log line (controller-manager and scheduler started), " +
		"and for upstream-kubeadm the moment kube-controller-manager and kube-scheduler both hold their leader leases (each starts its controllers then). " +
		"RSS and PSS are summed over the configuration's processes from /proc/<pid>/smaps_rollup. Creates are timed from the first request to the last response; " +
		"watch delivery is timed to the ADDED event on a separate watch connection, from the create's response (0 when the event came first) and from its request; " +
		"paced writes are one at a time, each waiting for its event. " +
		"Disk writes are write_bytes of /proc/<pid>/io summed over the processes.\n")

	b.WriteString("\n## Details\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "\n### %s\n\n", r.Name)
		for _, kind := range []struct {
			name string
			s    []startSample
		}{{"cold", r.Cold}, {"warm", r.Warm}} {
			if len(kind.s) == 0 {
				continue
			}
			fmt.Fprintf(&b, "- %s starts (/readyz s, all ready s, RSS MiB, load):", kind.name)
			for _, s := range kind.s {
				fmt.Fprintf(&b, " %.2f/%.2f/%.0f/%.2f;", s.Ready.Seconds(), s.AllReady.Seconds(), mibf(s.Mem.RSS), s.Load1)
			}
			b.WriteString("\n")
		}
		if r.PageCacheDropped > 0 {
			fmt.Fprintf(&b, "- before the first cold start, %.0f MiB of the binaries were dropped from the page cache\n", mibf(r.PageCacheDropped))
		}
		if len(r.Cold) > 0 {
			mm := r.Cold[0].Mem
			fmt.Fprintf(&b, "- at ready: PSS %.0f MiB = anon %.0f + file %.0f\n", mibf(mm.PSS), mibf(mm.PSSAnon), mibf(mm.PSSFile))
		}
		if r.MemIdle != nil {
			mm := r.MemIdle.Mem
			fmt.Fprintf(&b, "- after %s idle: RSS %.0f MiB, PSS %.0f MiB = anon %.0f + file %.0f (load %.2f)\n",
				r.MemIdle.After, mibf(mm.RSS), mibf(mm.PSS), mibf(mm.PSSAnon), mibf(mm.PSSFile), r.MemIdle.Load1)
		}
		for i := range r.Loads {
			l := &r.Loads[i]
			fmt.Fprintf(&b, "- requests, cold start %d: %d creates in %s (%d errors), latency p50 %.1f ms p99 %.1f ms; list %d items:",
				i+1, l.Creates, l.CreateTime.Round(time.Millisecond), l.Errors, msf(l.CreateP50), msf(l.CreateP99), l.ListItems)
			for _, t := range l.ListTimes {
				fmt.Fprintf(&b, " %.0f", msf(t))
			}
			fmt.Fprintf(&b, " ms; watch: %d events during the creates, %d never delivered (%d before the response; request to event p50 %.2f ms p99 %.2f ms), %d paced (%d before the response) (load %.2f)\n",
				l.WatchLoadN, l.WatchLoadMissed, l.WatchLoadEarly, msf(l.WatchLoadE2EP50), msf(l.WatchLoadE2EP99), l.WatchPaced, l.WatchEarly, l.Load1)
			if n := len(l.WatchLoadSlowest); n > 0 {
				runs, longest := stalls(l.WatchLoadSlowest, 5*time.Millisecond)
				fmt.Fprintf(&b, "  - the slowest %d of those events (%.1f to %.1f ms after the response) were written in %d bursts (responses within 5 ms of each other), the largest %d events\n",
					n, msf(slices.MinFunc(l.WatchLoadSlowest, byLate).Late), msf(slices.MaxFunc(l.WatchLoadSlowest, byLate).Late), runs, longest)
			}
		}
		if i := r.Idle; i != nil {
			fmt.Fprintf(&b, "- idle window %s: write_bytes %.2f MB (cancelled %.2f MB, wchar %.2f MB), CPU %.1f s; load %.2f -> %.2f; RSS at end %.0f MiB, PSS %.0f MiB\n",
				i.Window.Round(time.Second), float64(i.Written)/1e6, float64(i.Cancelled)/1e6, float64(i.WChar)/1e6,
				i.CPU.Seconds(), i.Load1Start, i.Load1End, mibf(i.MemEnd.RSS), mibf(i.MemEnd.PSS))
		}
		if len(r.Timeline) > 0 {
			b.WriteString("- edgeplane start-up phases (first cold start):")
			for _, p := range r.Timeline {
				fmt.Fprintf(&b, " %s %s;", p.Name, p.Duration)
			}
			b.WriteString("\n")
		}
		if len(r.Cold) > 0 && len(r.Cold[0].Checks) > 0 {
			b.WriteString("- last /readyz checks to turn ok (first cold start, s after exec):")
			for _, c := range slowest(r.Cold[0].Checks, 6) {
				fmt.Fprintf(&b, " %s %.2f;", c.name, c.at.Seconds())
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

type namedTime struct {
	name string
	at   time.Duration
}

func slowest(c checkTimes, n int) []namedTime {
	var s []namedTime
	for k, v := range c {
		s = append(s, namedTime{k, v})
	}
	sort.Slice(s, func(i, j int) bool { return s[i].at > s[j].at })
	if len(s) > n {
		s = s[:n]
	}
	return s
}

func binaryList(bs []binary) string {
	var parts []string
	for _, b := range bs {
		s := fmt.Sprintf("%s %.1f MB", filepath.Base(b.Path), float64(b.Bytes)/1e6)
		if !b.Stripped {
			s += " (NOT stripped)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " + ")
}

// firstLine shortens an error for the table: its first line and, when it
// quotes a log, the log's last line.
func firstLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) == 1 {
		return lines[0]
	}
	return lines[0] + " … " + lines[len(lines)-1]
}
