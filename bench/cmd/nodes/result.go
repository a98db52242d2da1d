package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
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
	LeasePUTs     int `json:"leasePUTs"`
	LeaseFailed   int `json:"leaseFailed"`
	LeaseTimedOut int `json:"leaseTimedOut"`
	// LeaseMissed is the renewals the nodes did not attempt at one every
	// quarter of the Lease's duration (missedRenewals; lines written
	// before show "?").
	LeaseMissed *int    `json:"leaseMissed,omitempty"`
	LeaseP50ms  float64 `json:"leaseP50ms"`
	LeaseP99ms  float64 `json:"leaseP99ms"`
	ListP50ms   float64 `json:"listPodsP50ms"`
	ListP99ms   float64 `json:"listPodsP99ms"`
	Lists       int     `json:"listPods"`
	ListErrors  int     `json:"listPodsErrors"`
	// ChurnDone is the pods deleted in the window, ChurnPerMinDone the
	// rate achieved, ChurnErrors the churn's requests that failed (its
	// lists and deletes), ChurnCreateErrors the replacement pods the
	// ReplicaSet controller failed to create (its FailedCreate events in
	// the window; lines written before show "?").
	ChurnDone         int     `json:"churnDone"`
	ChurnPerMinDone   float64 `json:"churnPerMinDone"`
	ChurnErrors       int     `json:"churnErrors"`
	ChurnCreateErrors *int    `json:"churnCreateErrors,omitempty"`
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

const tableHeader = "| config | sim | N | pods/node | churn/min asked (done; errors: delete, create) | nodes Ready s | pods Running s | RSS MiB (peak) | CPU % | writes MB/h (per node) | datastore MB | Lease PUT p50/p99 ms (n; failed, timed out; missed) | list pods -A p50/p99 ms (n; errors) | false NotReady nodes (times; longest / total s) | sim PSS MiB per node (total) | sim CPU % | load1 | killed node NotReady / pods evicted s | LIST burst: clients, lists (failed), list p99 ms; Lease PUT p99 ms in it (n) |\n" +
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
			create := "?"
			if r.ChurnCreateErrors != nil {
				create = fmt.Sprint(*r.ChurnCreateErrors)
			}
			churn += fmt.Sprintf(" (%.1f; %d, %s)", r.ChurnPerMinDone, r.ChurnErrors, create)
		}
		missed := "?"
		if r.LeaseMissed != nil {
			missed = fmt.Sprint(*r.LeaseMissed)
		}
		lease = fmt.Sprintf("%.1f / %.1f (%d; %d, %d; %s)", r.LeaseP50ms, r.LeaseP99ms, r.LeasePUTs, r.LeaseFailed, r.LeaseTimedOut, missed)
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
