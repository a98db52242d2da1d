// Command board runs edgeplane as a Raspberry Pi-class board would: the
// server as its own node (every default add-on on, CoreDNS from the test
// image) on a private containerd, in a memory cgroup with a limit and a CPU
// quota of one Cortex-A53-class core, and measures a small workload there.
//
// Each configuration (-configs) is scope:MiB:profile. Scope edgeplane puts
// the memory limit on edgeplane's cgroup only, containerd (with its shims)
// and the pods in cgroups of their own beside it, unlimited; scope board
// puts one limit over all three (a whole board less its OS). Either way
// edgeplane's cgroup has the CPU quota (-cpu, a share of one host core).
//
// The workload: a Deployment of 28 busybox httpd pods, a Job, a pod with a
// local-path volume (30 pods); a rolling update of the Deployment; while
// they run, GET, LIST pods and create once a second, and `kubectl get pods
// -A` every -kubectl-every; then -idle with one GET every 10 s. Reported:
// OOM kills (edgeplane, containerd, pods: the cgroups' counters, the
// kernel log, the kubelet's OOMKilled), edgeplane's RssAnon and RssFile
// over time, the limited cgroup's peak, major page faults per minute,
// nearest-rank p50/p99 of every latency with its sample count, pod create
// -> Running, and the times the node was seen NotReady.
//
//	board -bin bench/bin/edgeplane -coredns bench/bin/coredns -idle 30m
//	board -configs edgeplane:256:small -idle 3m -out board.jsonl
//	board -table board.jsonl
//
// Root only: cgroups, a network namespace, containerd.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/internal/pagecache"
	"github.com/edgeplane/edgeplane/internal/procfs"
)

// defaultCPUShare is one Cortex-A53 core at 1.2 GHz in this benchmark's
// reference host core (docs/PERFORMANCE.md, "The board benchmark"):
// sysbench 1.0.20 `cpu --threads=1` gives 687 events/s on a Raspberry Pi
// 3B+ (A53, 1.4 GHz; leoncode.co.uk), 589 scaled to 1.2 GHz, against 1658
// events per CPU-second on one core of the 2-core AMD EPYC VM the project's
// figures come from: 0.35.
const defaultCPUShare = 0.35

const (
	scopeEdgeplane = "edgeplane"
	scopeBoard     = "board"
)

// config is one configuration: where the limit is, how large, which
// --profile.
type config struct {
	Name     string `json:"config"`
	Scope    string `json:"scope"`
	LimitMiB int64  `json:"limit_mib"`
	Profile  string `json:"profile"`
}

// parseConfigs parses -configs: comma-separated scope:MiB:profile.
func parseConfigs(s string) ([]config, error) {
	var out []config
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		f := strings.Split(item, ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("-configs: %q is not scope:MiB:profile (e.g. edgeplane:256:small)", item)
		}
		if f[0] != scopeEdgeplane && f[0] != scopeBoard {
			return nil, fmt.Errorf("-configs: %q: scope %q is neither %s (the limit on edgeplane only) nor %s (one limit over edgeplane, containerd and the pods)", item, f[0], scopeEdgeplane, scopeBoard)
		}
		mib, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || mib < 64 {
			return nil, fmt.Errorf("-configs: %q: the limit %q is not a number of MiB of at least 64", item, f[1])
		}
		if f[2] != "default" && f[2] != "small" {
			return nil, fmt.Errorf("-configs: %q: profile %q is neither default nor small", item, f[2])
		}
		out = append(out, config{Name: fmt.Sprintf("%s-%dMiB-%s", f[0], mib, f[2]), Scope: f[0], LimitMiB: mib, Profile: f[2]})
	}
	if len(out) == 0 {
		return nil, errors.New("-configs: no configuration")
	}
	return out, nil
}

type options struct {
	bin, coreDNS, out, logDir, version string
	configs                            []config
	cpuShare                           float64
	idle, sampleEvery, kubectlEvery    time.Duration
	extraArgs                          []string
	cgroupRoot                         string
	keepPageCache                      bool
	// readAheadKB: the read-ahead of the disk the binary runs from (0: the
	// host's disk, where -bin is); hostReadAheadKB: that of -bin's disk.
	readAheadKB, hostReadAheadKB int
}

func parseOptions(args []string) (*options, error) {
	fs := flag.NewFlagSet("board", flag.ContinueOnError)
	o := &options{}
	configs := fs.String("configs", "edgeplane:512:default,edgeplane:256:small,board:384:small", "configurations, comma-separated scope:MiB:profile; scope edgeplane (the limit on edgeplane's cgroup) or board (one limit over edgeplane, containerd, shims and pods)")
	fs.StringVar(&o.bin, "bin", "bench/bin/edgeplane", "the edgeplane binary")
	fs.StringVar(&o.coreDNS, "coredns", "bench/bin/coredns", "the CoreDNS test binary (internal/testing/testimage/coredns) for the CoreDNS image")
	fs.StringVar(&o.out, "out", "bench/board-results.jsonl", "append each configuration's JSON line here (empty: none)")
	fs.StringVar(&o.logDir, "log-dir", "", "edgeplane's logs go here (empty: a temporary directory, kept)")
	fs.StringVar(&o.version, "version", "", "the version measured, for the JSON line")
	fs.Float64Var(&o.cpuShare, "cpu", defaultCPUShare, "edgeplane's CPU quota in host cores (default: one Cortex-A53 at 1.2 GHz on the reference host, docs/PERFORMANCE.md)")
	fs.DurationVar(&o.idle, "idle", 30*time.Minute, "the idle window after the workload")
	fs.DurationVar(&o.sampleEvery, "sample-every", 5*time.Second, "how often edgeplane's memory and faults are read")
	fs.DurationVar(&o.kubectlEvery, "kubectl-every", 5*time.Second, "how often `kubectl get pods -A` runs during the workload")
	fs.StringVar(&o.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "where the host mounts its cgroups")
	fs.BoolVar(&o.keepPageCache, "keep-page-cache", false, "do not drop the edgeplane binary from the page cache before each configuration (its cached pages are charged to the cgroup that read them first, not to the limited one)")
	fs.IntVar(&o.readAheadKB, "read-ahead-kb", defaultReadAheadKB, "run a copy of the binary from a loop-mounted ext4 filesystem with this read-ahead in KiB, a board's SD card's by default (0: run -bin from the host's disk, with the host's read-ahead)")
	extra := fs.String("edgeplane-args", "", "extra flags for every edgeplane server, space-separated")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.configs, err = parseConfigs(*configs); err != nil {
		return nil, err
	}
	if o.cpuShare <= 0 {
		return nil, fmt.Errorf("-cpu %v: the quota must be a positive number of host cores", o.cpuShare)
	}
	if o.idle < 0 || o.sampleEvery <= 0 || o.kubectlEvery <= 0 {
		return nil, errors.New("-idle must not be negative, -sample-every and -kubectl-every must be positive")
	}
	o.extraArgs = strings.Fields(*extra)
	return o, nil
}

// result is one configuration's JSON line.
type result struct {
	config
	Version   string  `json:"version,omitempty"`
	Time      string  `json:"time"`
	Cgroups   string  `json:"cgroups"`
	CPUShare  float64 `json:"cpu_share"`
	LoadStart float64 `json:"load_start"`
	LoadEnd   float64 `json:"load_end"`
	// BinaryCachedBefore: the bytes of the edgeplane binary in the page
	// cache before they were dropped (0 with -keep-page-cache).
	BinaryCachedBefore int64 `json:"binary_cached_before_drop"`
	// ReadAheadKB: the read-ahead of the disk the binary ran from (0: the
	// host's, HostReadAheadKB; -1: unknown).
	ReadAheadKB     int `json:"read_ahead_kb"`
	HostReadAheadKB int `json:"host_read_ahead_kb"`

	StartSec   float64 `json:"start_s"`   // edgeplane start to node and CoreDNS Ready
	PodsUpSec  float64 `json:"pods_up_s"` // the workload created to all up
	RolloutSec float64 `json:"rollout_s"`
	IdleSec    float64 `json:"idle_s"`
	// edgeplane's CPU time during the workload, its CPU use idle (% of
	// one host core), and the CFS periods its cgroup was throttled in.
	WorkloadCPUSec float64 `json:"workload_cpu_s"`
	IdleCPUPct     float64 `json:"idle_cpu_pct"`
	Throttled      string  `json:"cpu_throttled,omitempty"`

	OOM struct {
		Edgeplane  int64     `json:"edgeplane"`
		Containerd int64     `json:"containerd"`
		PodsCgroup int64     `json:"pods_cgroup"`
		PodsAPI    int       `json:"pods_api"`
		KernelLog  []oomKill `json:"kernel_log"`
		// KernelLogErr says why the kernel log was not read.
		KernelLogErr string `json:"kernel_log_err,omitempty"`
	} `json:"oom"`
	// LimitHits: the times the limited cgroup hit its limit.
	LimitHits int64 `json:"limit_hits"`

	WorkloadEnd sample  `json:"workload_end"`
	IdleEnd     sample  `json:"idle_end"`
	AnonMaxMiB  float64 `json:"anon_max_mib"`
	RSSMaxMiB   float64 `json:"rss_max_mib"`
	// Peaks of the cgroups (MiB): the limited one and each part.
	PeakMiB           float64 `json:"cgroup_peak_mib"`
	EdgeplanePeakMiB  float64 `json:"edgeplane_cgroup_peak_mib"`
	ContainerdPeakMiB float64 `json:"containerd_cgroup_peak_mib"`
	PodsPeakMiB       float64 `json:"pods_cgroup_peak_mib"`

	MajfltPerMinRun       float64 `json:"majflt_per_min_run"`
	MajfltPerMinIdle      float64 `json:"majflt_per_min_idle"`
	MajfltPerMinIdleWorst float64 `json:"majflt_per_min_idle_worst"`

	Get        summary `json:"get"`
	List       summary `json:"list_pods"`
	Create     summary `json:"create"`
	Kubectl    summary `json:"kubectl_get_pods_all"`
	IdleGet    summary `json:"idle_get"`
	PodRunning summary `json:"pod_create_to_running"`
	NotReady   int     `json:"notready"`

	Errors  []string `json:"errors,omitempty"`
	Samples []sample `json:"samples"`
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-table" {
		if err := printTableFile(os.Stdout, os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "board:", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseOptions(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "board:", err)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "board: runs as root (cgroups, a network namespace, containerd)")
		os.Exit(2)
	}
	for _, f := range []string{o.bin, o.coreDNS} {
		if _, err := os.Stat(f); err != nil {
			fmt.Fprintf(os.Stderr, "board: %v (bench/board.sh builds it)\n", err)
			os.Exit(2)
		}
	}
	host, err := detectCgroups(o.cgroupRoot)
	if err != nil {
		fmt.Fprintln(os.Stderr, "board:", err)
		os.Exit(2)
	}
	if o.logDir == "" {
		o.logDir, err = os.MkdirTemp("", "board-logs-")
	} else {
		err = os.MkdirAll(o.logDir, 0o700)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "board: the log directory:", err)
		os.Exit(1)
	}
	o.hostReadAheadKB = hostReadAheadKB(o.bin)
	var disk *readAheadDisk
	if o.readAheadKB > 0 {
		if disk, err = newReadAheadDisk(o.bin, o.readAheadKB); err != nil {
			fmt.Fprintf(os.Stderr, "board: the binary's disk: %v (-read-ahead-kb 0 runs -bin from the host's disk)\n", err)
			os.Exit(1)
		}
		o.bin = disk.bin
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "board: cgroup %s, CPU quota %.2f host core, idle %s, binary read-ahead %s (host's disk %d KiB), logs in %s\n",
		host.version, o.cpuShare, o.idle, readAheadText(o.readAheadKB, o.hostReadAheadKB), o.hostReadAheadKB, o.logDir)
	var results []*result
	failed := false
	for i, c := range o.configs {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "board: %s (load %.2f)\n", c.Name, procfs.LoadAvg())
		r, err := runConfig(ctx, o, host, i, c)
		if err != nil {
			failed = true
			fmt.Fprintf(os.Stderr, "board: %s: %v\n", c.Name, err)
		}
		if r != nil {
			results = append(results, r)
			if o.out != "" {
				if werr := appendJSON(o.out, r); werr != nil {
					fmt.Fprintln(os.Stderr, "board:", werr)
				}
			}
		}
	}
	printTable(os.Stdout, results)
	if disk != nil {
		if err := disk.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "board: removing the binary's disk:", err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// readAheadText describes the read-ahead the binary ran with.
func readAheadText(kb, hostKB int) string {
	if kb == 0 {
		kb = hostKB
	}
	if kb <= 0 { // -1: unreadable; 0: a line written before it was recorded
		return "unknown"
	}
	return strconv.Itoa(kb) + " KiB"
}

// runConfig sets one board up, measures it and tears it down.
func runConfig(ctx context.Context, o *options, host *cgroupHost, i int, c config) (*result, error) {
	r := &result{config: c, Version: o.version, Time: time.Now().UTC().Format(time.RFC3339),
		Cgroups: host.version.String(), CPUShare: o.cpuShare, LoadStart: procfs.LoadAvg(),
		ReadAheadKB: o.readAheadKB, HostReadAheadKB: o.hostReadAheadKB}
	b := &board{cfg: c, opts: o}
	var errs []error
	if !o.keepPageCache {
		// As after a boot: edgeplane reads its binary by page faults, and
		// those pages are charged to its cgroup, under the limit.
		cached, err := pagecache.Drop([]string{o.bin})
		if err != nil {
			return nil, fmt.Errorf("%w (or -keep-page-cache)", err)
		}
		r.BinaryCachedBefore = cached
	}
	if err := b.setUp(i, host); err != nil {
		errs = append(errs, fmt.Errorf("setting up: %w", err))
	} else {
		started := time.Now()
		if err := b.start(ctx); err != nil {
			errs = append(errs, fmt.Errorf("starting edgeplane: %w", err))
		} else if err := b.measure(ctx, r, started); err != nil {
			errs = append(errs, err)
		}
		b.collect(r)
	}
	if err := b.tearDown(); err != nil {
		errs = append(errs, fmt.Errorf("tearing down: %w", err))
	}
	r.LoadEnd = procfs.LoadAvg()
	for _, e := range errs {
		r.Errors = append(r.Errors, e.Error())
	}
	return r, errors.Join(errs...)
}

// collect reads the cgroups' counters and the kernel log before teardown.
func (b *board) collect(r *result) {
	read := func(g group, what string) memStats {
		s, err := g.readMemStats()
		if err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s cgroup: %v", what, err))
		}
		return s
	}
	ep, ctd, pods := read(b.edgeplane, "edgeplane"), read(b.containerd, "containerd"), read(b.pods, "pods")
	lim := ep
	if b.limited == b.root {
		lim = read(b.root, "board")
	}
	r.OOM.Edgeplane, r.OOM.Containerd = ep.OOMKills, ctd.OOMKills
	if b.root.h.version == cgroupV2 {
		// v2 counts a cgroup's descendants' kills too.
		r.OOM.PodsCgroup = max(r.OOM.PodsCgroup, pods.OOMKills)
	}
	r.LimitHits = lim.LimitHits
	r.PeakMiB, r.EdgeplanePeakMiB, r.ContainerdPeakMiB, r.PodsPeakMiB = mib(lim.Peak), mib(ep.Peak), mib(ctd.Peak), mib(pods.Peak)
	r.Throttled = b.edgeplane.throttled()
	log, err := kernelLog()
	if err != nil {
		r.OOM.KernelLogErr = err.Error()
		return
	}
	r.OOM.KernelLog = parseOOMKills(log, b.root.path)
}

func metav1GetOptions() metav1.GetOptions { return metav1.GetOptions{} }

func appendJSON(path string, r *result) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func printTableFile(w io.Writer, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rs []*result
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		r := &result{}
		if err := json.Unmarshal([]byte(line), r); err != nil {
			return fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		rs = append(rs, r)
	}
	printTable(w, rs)
	return nil
}

const tableHeader = "| config | cpu | start s | 30 pods up s | rollout s | OOM kills ep/ctd/pods | RSS anon/file MiB, workload end | idle end | cgroup peak MiB | majflt/min idle (worst) | edgeplane CPU s workload / % idle | GET p50/p99 ms (n) | LIST pods | create | kubectl get -A | idle GET | pod -> Running | NotReady |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"

func printTable(w io.Writer, rs []*result) {
	fmt.Fprintln(w, tableHeader)
	for _, r := range rs {
		fmt.Fprintln(w, r.row())
	}
	for _, r := range rs {
		fmt.Fprintf(w, "%s: binary read-ahead %s; cgroup %s, load %.1f -> %.1f; cgroup peaks edgeplane %.0f, containerd+shims %.0f, pods %.0f MiB; edgeplane RSS max %.0f MiB (anon %.0f); CPU quota throttled %s; idle %.0f s\n",
			r.Name, readAheadText(r.ReadAheadKB, r.HostReadAheadKB), r.Cgroups, r.LoadStart, r.LoadEnd, r.EdgeplanePeakMiB, r.ContainerdPeakMiB, r.PodsPeakMiB, r.RSSMaxMiB, r.AnonMaxMiB, r.Throttled, r.IdleSec)
		for _, k := range r.OOM.KernelLog {
			fmt.Fprintf(w, "%s: kernel OOM kill of %s (pid %d) in %s, limit of %s\n", r.Name, k.Task, k.PID, k.TaskMemcg, k.OOMMemcg)
		}
		for _, e := range r.Errors {
			fmt.Fprintf(w, "%s: %s\n", r.Name, e)
		}
	}
}

func (r *result) row() string {
	oomPods := max(r.OOM.PodsCgroup, int64(r.OOM.PodsAPI))
	kernel := "kernel log: " + strconv.Itoa(len(r.OOM.KernelLog))
	if r.OOM.KernelLogErr != "" {
		kernel = "kernel log unread"
	}
	memCell := func(s sample) string {
		if s.T == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f/%.0f", s.AnonMiB, s.FileMiB)
	}
	return fmt.Sprintf("| %s | %.2f | %.0f | %.0f | %.0f | %d/%d/%d (%s) | %s | %s | %.0f (%d at limit) | %.0f (%.0f) | %.0f / %.1f | %s | %s | %s | %s | %s | %s | %d |",
		r.Name, r.CPUShare, r.StartSec, r.PodsUpSec, r.RolloutSec,
		r.OOM.Edgeplane, r.OOM.Containerd, oomPods, kernel,
		memCell(r.WorkloadEnd), memCell(r.IdleEnd), r.PeakMiB, r.LimitHits,
		r.MajfltPerMinIdle, r.MajfltPerMinIdleWorst, r.WorkloadCPUSec, r.IdleCPUPct,
		r.Get.cell(), r.List.cell(), r.Create.cell(), r.Kubectl.cell(), r.IdleGet.cell(), r.PodRunning.cell(), r.NotReady)
}
