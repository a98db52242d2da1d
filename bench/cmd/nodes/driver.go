package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

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
	renewEvery, err := renewInterval(ctx, cs, f.name(0))
	if err != nil {
		return err
	}
	createsBefore, err := readFailedCreates(ctx, cs, ns, name)
	if err != nil {
		return fmt.Errorf("reading the workload's FailedCreate events: %w", err)
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
				// A failed delete is not retried: the rate asked is
				// of attempts, the rate done of pods deleted.
				n, failed := churnOnce(ctx, cs, ns, name, k)
				churnDebt -= float64(n + failed)
				res.ChurnDone += n
				res.ChurnErrors += failed
			}
		}
	}
	to := time.Now()
	stopWatch()
	res.FailuresCounted = true
	res.setNotReady(notReady.counts())
	if createsAfter, err := readFailedCreates(ctx, cs, ns, name); err == nil {
		res.ChurnCreateErrors = ptr.To(createsBefore.since(createsAfter))
	} else {
		fmt.Fprintln(os.Stderr, "nodes: reading the workload's FailedCreate events:", err)
	}
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
	res.LeaseMissed = ptr.To(missedRenewals(lat.attempts, from, to, renewEvery))
	if len(errs) > 0 {
		return fmt.Errorf("lease latencies: %w", errors.Join(errs...))
	}
	return nil
}

// renewInterval is how often node renews its Lease: a quarter of the
// Lease's duration, as the kubelet (and a lite node) renews it.
func renewInterval(ctx context.Context, cs kubernetes.Interface, node string) (time.Duration, error) {
	l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("the Lease of node %s: %w", node, err)
	}
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return 0, fmt.Errorf("the Lease of node %s has no duration", node)
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second / 4, nil
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
