package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// sample is edgeplane's memory at one moment.
type sample struct {
	T       float64 `json:"t_s"` // since edgeplane started
	AnonMiB float64 `json:"anon_mib"`
	FileMiB float64 `json:"file_mib"`
	Majflt  int64   `json:"majflt"`
	// CgroupMiB is the limited cgroup's usage.
	CgroupMiB float64 `json:"cgroup_mib"`
}

// sampler reads edgeplane's /proc status and stat, and the limited cgroup,
// every interval, and walks the pods' cgroups for OOM kills.
type sampler struct {
	b     *board
	start time.Time

	mu       sync.Mutex
	samples  []sample
	podOOMs  map[string]int64
	readErrs int
}

func (s *sampler) run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		s.take()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *sampler) take() {
	pid := s.b.pid
	anon, err1 := procfs.StatusBytes(pid, "RssAnon")
	file, err2 := procfs.StatusBytes(pid, "RssFile")
	maj, err3 := majorFaults(pid)
	cg, err4 := s.b.limited.readMemStats()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.pods.oomKillsBelow(s.podOOMs)
	if err1 != nil || err2 != nil || err3 != nil || (err4 != nil && cg.Usage == 0) {
		s.readErrs++
		return
	}
	s.samples = append(s.samples, sample{T: time.Since(s.start).Seconds(), AnonMiB: mib(anon), FileMiB: mib(file), Majflt: maj, CgroupMiB: mib(cg.Usage)})
}

func (s *sampler) last() sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return sample{}
	}
	return s.samples[len(s.samples)-1]
}

func (s *sampler) all() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// faultRates are the major page faults per minute between from and to (in
// sampler time): the mean, and the most in any one minute (the samples
// within a minute of each other that are furthest apart, scaled).
func faultRates(samples []sample, from, to float64) (mean, worst float64) {
	var in []sample
	for _, s := range samples {
		if s.T >= from && s.T <= to {
			in = append(in, s)
		}
	}
	if len(in) < 2 {
		return 0, 0
	}
	span := in[len(in)-1].T - in[0].T
	if span <= 0 {
		return 0, 0
	}
	mean = float64(in[len(in)-1].Majflt-in[0].Majflt) / span * 60
	for i := range in {
		for j := i + 1; j < len(in) && in[j].T-in[i].T <= 60; j++ {
			if d := in[j].T - in[i].T; d >= 30 { // a window of at least half a minute
				worst = max(worst, float64(in[j].Majflt-in[i].Majflt)/d*60)
			}
		}
	}
	return mean, max(worst, mean)
}

// measure runs the workload on a started board and fills r.
func (b *board) measure(ctx context.Context, r *result, started time.Time) error {
	o := b.opts
	if err := b.waitFor(ctx, 10*time.Minute, "the node Ready and a Ready CoreDNS pod", b.nodeAndDNSReady); err != nil {
		return err
	}
	r.StartSec = time.Since(started).Seconds()

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	nr, err := watchNotReady(wctx, b.client)
	if err != nil {
		return err
	}
	smp := &sampler{b: b, start: started, podOOMs: map[string]int64{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); smp.run(wctx, o.sampleEvery) }()
	defer func() { stop(); wg.Wait() }()
	pt, err := watchPods(wctx, b.client)
	if err != nil {
		return err
	}

	// The workload, probed.
	cpu0, _ := procfs.CPUTime(b.pid)
	pctx, stopProbes := context.WithCancel(wctx)
	var pr probes
	var pwg sync.WaitGroup
	begin := time.Now()
	if err := b.createWorkload(ctx); err != nil {
		stopProbes()
		return fmt.Errorf("creating the workload: %w", err)
	}
	pwg.Add(1)
	go func() { defer pwg.Done(); b.runProbes(pctx, &pr, o.kubectlEvery) }()
	err = b.waitFor(ctx, 10*time.Minute, fmt.Sprintf("%d workload pods up", workloadPods), b.workloadUp)
	r.PodsUpSec = time.Since(begin).Seconds()
	if err == nil {
		begin = time.Now()
		if err = b.rollingUpdate(ctx); err == nil {
			err = b.waitFor(ctx, 10*time.Minute, "the rolling update", b.workloadUp)
			r.RolloutSec = time.Since(begin).Seconds()
		}
	}
	stopProbes()
	pwg.Wait()
	cpu1, _ := procfs.CPUTime(b.pid)
	r.WorkloadCPUSec = (cpu1 - cpu0).Seconds()
	r.Get, r.List, r.Create, r.Kubectl = pr.get.summary(), pr.list.summary(), pr.create.summary(), pr.kctl.summary()
	pl := pt.latencies()
	r.PodRunning = pl.summary()
	r.WorkloadEnd = smp.last()
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
	}

	// Idle: one GET every 10 s, to see a stall while the kernel reclaims.
	if err == nil {
		idleFrom := time.Since(started).Seconds()
		var idle latencies
		end := time.After(o.idle)
		tick := time.NewTicker(10 * time.Second)
	idleLoop:
		for {
			select {
			case <-end:
				break idleLoop
			case <-ctx.Done():
				break idleLoop
			case <-tick.C:
			}
			if !b.running() {
				r.Errors = append(r.Errors, "edgeplane exited during the idle window")
				break
			}
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			t := time.Now()
			_, gerr := b.client.CoreV1().Nodes().Get(rctx, nodeName, metav1GetOptions())
			idle.add(time.Since(t), gerr)
			cancel()
		}
		tick.Stop()
		smp.take()
		r.IdleGet = idle.summary()
		r.IdleSec = time.Since(started).Seconds() - idleFrom
		if cpu2, err := procfs.CPUTime(b.pid); err == nil && r.IdleSec > 0 {
			r.IdleCPUPct = (cpu2 - cpu1).Seconds() / r.IdleSec * 100
		}
		r.IdleEnd = smp.last()
		r.MajfltPerMinIdle, r.MajfltPerMinIdleWorst = faultRates(smp.all(), idleFrom, time.Since(started).Seconds())
	}
	r.MajfltPerMinRun, _ = faultRates(smp.all(), 0, time.Since(started).Seconds())
	r.NotReady = nr.count()
	n, aerr := b.apiOOMKilled(ctx)
	if aerr != nil {
		r.Errors = append(r.Errors, "listing pods for OOMKilled: "+aerr.Error())
	}
	r.OOM.PodsAPI = n
	stop()
	wg.Wait()
	r.Samples = smp.all()
	for _, s := range r.Samples {
		r.AnonMaxMiB = max(r.AnonMaxMiB, s.AnonMiB)
		r.RSSMaxMiB = max(r.RSSMaxMiB, s.AnonMiB+s.FileMiB)
	}
	smp.mu.Lock()
	for _, k := range smp.podOOMs {
		r.OOM.PodsCgroup += k
	}
	smp.mu.Unlock()
	return err
}
