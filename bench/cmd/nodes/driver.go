package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// result is one run's figures.
type result struct {
	Label string `json:"label"`
	// Sim is the node simulator (hollow or lite; empty in lines written
	// before there was a choice: hollow).
	Sim              string  `json:"sim,omitempty"`
	Nodes            int     `json:"nodes"`
	PodsPerNode      int     `json:"podsPerNode"`
	ChurnPerMin      int     `json:"churnPerMin"`
	WindowSeconds    float64 `json:"windowSeconds"`
	NodesReadySec    float64 `json:"nodesReadySeconds"`
	PodsRunningSec   float64 `json:"podsRunningSeconds"`
	RSSMiB           float64 `json:"rssMiB"`
	PeakRSSMiB       float64 `json:"peakRssMiB"`
	CPUPercent       float64 `json:"cpuPercent"`
	WritesMBPerHour  float64 `json:"writesMBPerHour"`
	WritesPerNodeMBh float64 `json:"writesPerNodeMBPerHour"`
	DatastoreMB      float64 `json:"datastoreMB"`
	// LeasePUTs are the renewals that succeeded in the window (the
	// percentiles are theirs, by nearest rank); LeaseFailed and
	// LeaseTimedOut the ones that did not.
	LeasePUTs     int     `json:"leasePUTs"`
	LeaseFailed   int     `json:"leaseFailed"`
	LeaseTimedOut int     `json:"leaseTimedOut"`
	LeaseP50ms    float64 `json:"leaseP50ms"`
	LeaseP99ms    float64 `json:"leaseP99ms"`
	ListP50ms     float64 `json:"listPodsP50ms"`
	ListP99ms     float64 `json:"listPodsP99ms"`
	Lists         int     `json:"listPods"`
	ListErrors    int     `json:"listPodsErrors"`
	// ChurnDone is the pods deleted in the window, ChurnPerMinDone the
	// rate achieved, ChurnErrors the churn's requests that failed.
	ChurnDone       int     `json:"churnDone"`
	ChurnPerMinDone float64 `json:"churnPerMinDone"`
	ChurnErrors     int     `json:"churnErrors"`
	// FalseNotReady is the nodes whose Ready was not True at least once
	// while their process lived, NotReadyEpisodes the times it went so;
	// seen by a watch of the Nodes (before: 10 s samples, FailuresCounted
	// false). NotReadySeconds is each episode's duration, in the order they
	// ended (one still open at the window's end counts to it; the first
	// maxNotReadyListed), NotReadyLongestSec and NotReadyTotalSec of all
	// (lines written before durations show "?" for them).
	FalseNotReady      int       `json:"falseNotReady"`
	NotReadyEpisodes   int       `json:"notReadyEpisodes"`
	NotReadySeconds    []float64 `json:"notReadySeconds,omitempty"`
	NotReadyLongestSec float64   `json:"notReadyLongestSeconds,omitempty"`
	NotReadyTotalSec   float64   `json:"notReadyTotalSeconds,omitempty"`
	// FailuresCounted: the line counts failed renewals, lists and churn
	// requests (lines written before do not: their columns show "?").
	FailuresCounted bool `json:"failuresCounted,omitempty"`
	// HollowPSSMiB is the simulator's PSS per node (the name is from when
	// every node was a hollow kubelet process); SimPSSMiB its processes'
	// total, SimCPUPercent their CPU over the window (% of one core).
	HollowPSSMiB    float64 `json:"hollowPssMiBEach"`
	SimPSSMiB       float64 `json:"simPssMiB,omitempty"`
	SimCPUPercent   float64 `json:"simCpuPercent,omitempty"`
	Load1           float64 `json:"load1"`
	KillNotReadySec float64 `json:"killNotReadySeconds,omitempty"`
	// KillEvictedSec: from the kill until every workload pod of the
	// killed node was marked for deletion (evictAfter after the taint).
	KillEvictedSec float64 `json:"killEvictedSeconds,omitempty"`
	// A LIST burst in the window (-list-burst): its clients, the lists
	// that completed and failed, their p99, and the Lease PUTs timed
	// inside it with their p99.
	BurstClients    int     `json:"burstClients,omitempty"`
	BurstLists      int     `json:"burstLists,omitempty"`
	BurstFailed     int     `json:"burstFailed,omitempty"`
	BurstListP99ms  float64 `json:"burstListP99ms,omitempty"`
	BurstLeasePUTs  int     `json:"burstLeasePUTs,omitempty"`
	BurstLeaseP99ms float64 `json:"burstLeaseP99ms,omitempty"`
}

const tableHeader = "| config | sim | N | pods/node | churn/min asked (done; errors) | nodes Ready s | pods Running s | RSS MiB (peak) | CPU % | writes MB/h (per node) | datastore MB | Lease PUT p50/p99 ms (n; failed, timed out) | list pods -A p50/p99 ms (n; errors) | false NotReady nodes (times; longest / total s) | sim PSS MiB per node (total) | sim CPU % | load1 | killed node NotReady / pods evicted s | LIST burst: clients, lists (failed), list p99 ms; Lease PUT p99 ms in it (n) |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"

func (r *result) print(w io.Writer) {
	fmt.Fprintln(w, tableHeader)
	fmt.Fprintln(w, r.row())
}

// printTable prints the results appended to path (-out) as one table.
func printTable(w io.Writer, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, tableHeader)
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var r result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		fmt.Fprintln(w, r.row())
	}
	return nil
}

func (r *result) row() string {
	kill := "-"
	if r.KillNotReadySec > 0 {
		kill = fmt.Sprintf("%.0f", r.KillNotReadySec)
		if r.KillEvictedSec > 0 {
			kill += fmt.Sprintf(" / %.0f", r.KillEvictedSec)
		}
	}
	sim, pss, simCPU := r.Sim, fmt.Sprintf("%.2f", r.HollowPSSMiB), "-"
	if sim == "" {
		sim = simHollow
	}
	if r.SimPSSMiB > 0 {
		pss += fmt.Sprintf(" (%.0f)", r.SimPSSMiB)
		simCPU = fmt.Sprintf("%.1f", r.SimCPUPercent)
	}
	burst := "-"
	if r.BurstClients > 0 {
		burst = fmt.Sprintf("%d, %d (%d), %.0f; %.1f (%d)", r.BurstClients, r.BurstLists, r.BurstFailed, r.BurstListP99ms, r.BurstLeaseP99ms, r.BurstLeasePUTs)
	}
	churn := fmt.Sprintf("%d", r.ChurnPerMin)
	lease := fmt.Sprintf("%.1f / %.1f (%d; ?)", r.LeaseP50ms, r.LeaseP99ms, r.LeasePUTs)
	list := fmt.Sprintf("%.0f / %.0f (?)", r.ListP50ms, r.ListP99ms)
	notReady := fmt.Sprintf("%d (10 s samples)", r.FalseNotReady)
	if r.FailuresCounted {
		if r.ChurnPerMin > 0 {
			churn += fmt.Sprintf(" (%.1f; %d)", r.ChurnPerMinDone, r.ChurnErrors)
		}
		lease = fmt.Sprintf("%.1f / %.1f (%d; %d, %d)", r.LeaseP50ms, r.LeaseP99ms, r.LeasePUTs, r.LeaseFailed, r.LeaseTimedOut)
		list = fmt.Sprintf("%.0f / %.0f (%d; %d)", r.ListP50ms, r.ListP99ms, r.Lists, r.ListErrors)
		notReady = fmt.Sprintf("%d (%d)", r.FalseNotReady, r.NotReadyEpisodes)
		switch {
		case r.NotReadyEpisodes > 0 && len(r.NotReadySeconds) == 0:
			notReady = fmt.Sprintf("%d (%d; ? / ? s)", r.FalseNotReady, r.NotReadyEpisodes)
		case r.NotReadyEpisodes > 0:
			notReady = fmt.Sprintf("%d (%d; %.1f / %.1f s)", r.FalseNotReady, r.NotReadyEpisodes, r.NotReadyLongestSec, r.NotReadyTotalSec)
		}
	}
	return fmt.Sprintf("| %s | %s | %d | %d | %s | %.0f | %.0f | %.0f (%.0f) | %.1f | %.1f (%.2f) | %.1f | %s | %s | %s | %s | %s | %.1f | %s | %s |",
		r.Label, sim, r.Nodes, r.PodsPerNode, churn, r.NodesReadySec, r.PodsRunningSec, r.RSSMiB, r.PeakRSSMiB, r.CPUPercent,
		r.WritesMBPerHour, r.WritesPerNodeMBh, r.DatastoreMB, lease, list,
		notReady, pss, simCPU, r.Load1, kill, burst)
}

func (r *result) appendJSON(path string) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// maxNotReadyListed bounds the NotReady durations a result line lists.
const maxNotReadyListed = 1000

// setNotReady puts a NotReady watch's figures in r.
func (r *result) setNotReady(c notReadyCounts) {
	r.FalseNotReady, r.NotReadyEpisodes = c.nodes, c.episodes()
	r.NotReadyLongestSec, r.NotReadyTotalSec = c.longest().Seconds(), c.total().Seconds()
	r.NotReadySeconds = nil
	for _, d := range c.durations[:min(len(c.durations), maxNotReadyListed)] {
		r.NotReadySeconds = append(r.NotReadySeconds, float64(d.Milliseconds())/1000)
	}
}

// runDriver runs one measurement (see the package comment).
func runDriver(ctx context.Context, o *driverOptions) (*result, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, err
	}
	if o.server == "" {
		o.server = cfg.Host
	} else {
		cfg.Host = o.server
	}
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir := o.workDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "hollow-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	res := &result{Label: o.label, Sim: o.sim, Nodes: o.n, PodsPerNode: o.podsPerNode, ChurnPerMin: o.churn}
	var f simulator = newFleet(exe, dir, o.server, o.token, o.prefix)
	readyWait := 3*time.Minute + time.Duration(o.n)*2*time.Second
	if o.sim == simLite {
		f = newLiteFleet(exe, dir, o.server, o.token, o.prefix, o.litePerProc)
		readyWait = 3*time.Minute + time.Duration(o.n)*4*o.startEvery
	}
	fmt.Fprintf(os.Stderr, "nodes: starting %d %s nodes\n", o.n, o.sim)
	defer func() {
		if err := f.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "nodes:", err)
		}
	}()

	start := time.Now()
	if err := f.startAll(o.n, o.startEvery); err != nil {
		return nil, err
	}
	dead := func() error {
		for i := range o.n {
			if !f.alive(i) {
				return fmt.Errorf("%s node %s stopped:\n%s", o.sim, f.name(i), f.logTail(i))
			}
		}
		return nil
	}
	if err := waitNodesReady(ctx, cs, o.prefix, o.n, readyWait, dead); err != nil {
		return nil, err
	}
	res.NodesReadySec = time.Since(start).Seconds()
	fmt.Fprintf(os.Stderr, "nodes: %d nodes Ready in %.0f s\n", o.n, res.NodesReadySec)

	const ns, name = "default", "hollow-load"
	want := o.n * o.podsPerNode
	if want > 0 {
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(name, int32(want)), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating the workload: %w", err)
		}
		took, _, err := waitRunning(ctx, cs, ns, name, want, 5*time.Minute+time.Duration(want)*100*time.Millisecond)
		if err != nil {
			return nil, err
		}
		res.PodsRunningSec = took.Seconds()
		fmt.Fprintf(os.Stderr, "nodes: %d pods Running in %.0f s\n", want, res.PodsRunningSec)
	}

	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(o.settle):
	}

	if o.listBurst > 0 {
		if err := ensureBurstUser(ctx, cs); err != nil {
			return nil, err
		}
	}
	if err := measureWindow(ctx, o, cfg, cs, f, res, ns, name); err != nil {
		return res, err
	}
	if o.kill {
		victim := f.name(o.n - 1)
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
			LabelSelector: workloadLabel + "=" + name, FieldSelector: "spec.nodeName=" + victim,
		})
		if err != nil {
			return res, fmt.Errorf("listing the pods of %s: %w", victim, err)
		}
		start := time.Now()
		d, err := killOne(ctx, cs, f, o.n-1)
		if err != nil {
			return res, err
		}
		res.KillNotReadySec = d.Seconds()
		if len(pods.Items) > 0 {
			if err := waitEvicted(ctx, cs, pods.Items, 3*time.Minute); err != nil {
				return res, fmt.Errorf("the pods of killed node %s: %w", victim, err)
			}
			res.KillEvictedSec = time.Since(start).Seconds()
		}
	}
	if want > 0 {
		// Leave the server as it was found.
		_ = cs.AppsV1().Deployments(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	return res, nil
}

// measureWindow samples the control plane for o.duration.
func measureWindow(ctx context.Context, o *driverOptions, admin *rest.Config, cs kubernetes.Interface, f simulator, res *result, ns, name string) error {
	before, err := readTotals(o.pids)
	if err != nil {
		return fmt.Errorf("reading the control plane's processes %v: %w", o.pids, err)
	}
	names := make(map[string]int, o.n)
	for j := range o.n {
		names[f.name(j)] = j
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	notReady, err := watchNotReady(watchCtx, cs, names, f.alive)
	if err != nil {
		return err
	}
	simBefore := cpuTimes(f.pids())
	from := time.Now()
	peak := before.rss
	var lists []time.Duration
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	end := time.After(o.duration)
	var burst <-chan burstResult
	if o.listBurst > 0 {
		burst = startListBurst(ctx, admin, o.listBurst, o.duration)
	}
	var churnDebt float64
	loops := int(o.duration/(10*time.Second)) + 2
	for i := 0; i < loops; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-end:
			i = loops
			continue
		case <-tick.C:
		}
		if t, err := readTotals(o.pids); err == nil && t.rss > peak {
			peak = t.rss
		}
		if i%3 == 0 {
			if d, _, err := listAllPods(ctx, cs); err == nil {
				lists = append(lists, d)
			} else {
				res.ListErrors++
			}
		}
		if o.churn > 0 {
			churnDebt += float64(o.churn) / 6
			if k := int(churnDebt); k > 0 {
				n, failed := churnOnce(ctx, cs, ns, name, k)
				churnDebt -= float64(n)
				res.ChurnDone += n
				res.ChurnErrors += failed
			}
		}
	}
	to := time.Now()
	stopWatch()
	res.FailuresCounted = true
	res.setNotReady(notReady.counts())
	var b burstResult
	if burst != nil {
		b = <-burst
		res.BurstClients, res.BurstLists, res.BurstFailed = o.listBurst, b.lists, b.failed
		res.BurstListP99ms = ms(percentile(sortDurations(b.latency), 99))
	}
	after, err := readTotals(o.pids)
	if err != nil {
		return fmt.Errorf("reading the control plane's processes: %w", err)
	}
	window := to.Sub(from)
	res.WindowSeconds = window.Seconds()
	res.RSSMiB = float64(after.rss) / (1 << 20)
	res.PeakRSSMiB = float64(max(peak, after.rss)) / (1 << 20)
	res.CPUPercent = 100 * (after.cpu - before.cpu).Seconds() / window.Seconds()
	perHour := float64(after.writeBytes-before.writeBytes) * (float64(time.Hour) / float64(window)) / 1e6
	res.WritesMBPerHour = perHour
	res.WritesPerNodeMBh = perHour / float64(o.n)
	res.DatastoreMB = float64(dirSize(o.datastoreDir)) / 1e6
	res.Load1 = procfs.LoadAvg()
	lists = sortDurations(lists)
	res.Lists = len(lists)
	res.ChurnPerMinDone = float64(res.ChurnDone) / window.Minutes()
	res.ListP50ms, res.ListP99ms = ms(percentile(lists, 50)), ms(percentile(lists, 99))
	var simPSS int64
	pids := f.pids()
	for _, pid := range pids {
		if r, err := pss(pid); err == nil {
			simPSS += r
		}
	}
	res.SimPSSMiB = float64(simPSS) / (1 << 20)
	res.HollowPSSMiB = res.SimPSSMiB / float64(o.n)
	var simCPU time.Duration
	for pid, t := range cpuTimes(pids) {
		if t0, ok := simBefore[pid]; ok {
			simCPU += t - t0
		}
	}
	res.SimCPUPercent = 100 * simCPU.Seconds() / window.Seconds()
	// The nodes write their lease latencies every 30 s: wait for one more
	// write so that the window's end is in the files.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(31 * time.Second):
	}
	var lat, inBurst leaseRenewals
	var errs []error
	for _, file := range f.latencyFiles() {
		d, err := readLeaseLatencies(file, from, to)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		lat.addAll(d)
		if !b.from.IsZero() {
			d, _ := readLeaseLatencies(file, b.from, b.to)
			inBurst.addAll(d)
		}
	}
	res.BurstLeasePUTs = len(inBurst.ok)
	res.BurstLeaseP99ms = ms(percentile(sortDurations(inBurst.ok), 99))
	ok := sortDurations(lat.ok)
	res.LeasePUTs, res.LeaseFailed, res.LeaseTimedOut = len(ok), lat.failed, lat.timedOut
	res.LeaseP50ms, res.LeaseP99ms = ms(percentile(ok, 50)), ms(percentile(ok, 99))
	if len(errs) > 0 {
		return fmt.Errorf("lease latencies: %w", errors.Join(errs...))
	}
	return nil
}

// killOne kills node i and times how long until its Ready condition is no
// longer True (at most killWait).
func killOne(ctx context.Context, cs kubernetes.Interface, f simulator, i int) (time.Duration, error) {
	start := time.Now()
	if err := f.kill(i); err != nil {
		return 0, err
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, killWait, false, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, f.name(i), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return nodeReady(n) != corev1.ConditionTrue, nil
	})
	if err != nil {
		return 0, fmt.Errorf("killed node %s still Ready after %s: %w", f.name(i), killWait, err)
	}
	return time.Since(start), nil
}

// killWait bounds the wait for a killed node's NotReady: the grace period of
// the longest --node-heartbeat (2 min: 10 min) and a minute more.
const killWait = 11 * time.Minute

// waitEvicted polls (every second, at most timeout) until each of pods is
// gone or marked for deletion: the taint-based eviction of a dead node's
// pods (their kubelet is gone, so they stay Terminating until pod GC).
func waitEvicted(ctx context.Context, cs kubernetes.Interface, pods []corev1.Pod, timeout time.Duration) error {
	left := len(pods)
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, false, func(ctx context.Context) (bool, error) {
		left = 0
		for _, p := range pods {
			cur, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return false, nil
			case cur.UID != p.UID || cur.DeletionTimestamp != nil:
			default:
				left++
			}
		}
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d pods not evicted after %s: %w", left, len(pods), timeout, err)
	}
	return nil
}
