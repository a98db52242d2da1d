package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// procTotals sums what the control plane's processes used so far.
type procTotals struct {
	cpu        time.Duration
	writeBytes int64
	rss        int64
}

func readTotals(pids []int) (procTotals, error) {
	var t procTotals
	for _, pid := range pids {
		cpu, err := procfs.CPUTime(pid)
		if err != nil {
			return t, err
		}
		io, err := procfs.ReadIO(pid)
		if err != nil {
			return t, err
		}
		rss, err := procfs.RSS(pid)
		if err != nil {
			return t, err
		}
		t.cpu += cpu
		t.writeBytes += io.WriteBytes
		t.rss += rss
	}
	return t, nil
}

// cpuTimes maps each of pids that can still be read to its CPU time so far
// (a simulator's processes: one that ended is left out).
func cpuTimes(pids []int) map[int]time.Duration {
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		if cpu, err := procfs.CPUTime(pid); err == nil {
			out[pid] = cpu
		}
	}
	return out
}

// dirSize is the bytes of the regular files under dir (0 for "").
func dirSize(dir string) int64 {
	if dir == "" {
		return 0
	}
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n
}

// leaseRenewals are the Lease renewals of a window: the durations of those
// that succeeded, how many failed or timed out, and when each node's
// attempts ended (lines that name their node).
type leaseRenewals struct {
	ok               []time.Duration
	failed, timedOut int
	attempts         map[string][]time.Time
}

func (l *leaseRenewals) addAll(o leaseRenewals) {
	l.ok = append(l.ok, o.ok...)
	l.failed += o.failed
	l.timedOut += o.timedOut
	for node, at := range o.attempts {
		if l.attempts == nil {
			l.attempts = map[string][]time.Time{}
		}
		l.attempts[node] = append(l.attempts[node], at...)
	}
}

// readLeaseLatencies reads a node's (or a lite process's) lease latency file
// and keeps the renewals that ended in [from, to]. A line is "<unix s> <µs>
// [ok|failed|timeout [<node>]]" (no outcome: ok).
func readLeaseLatencies(path string, from, to time.Time) (leaseRenewals, error) {
	var out leaseRenewals
	f, err := os.Open(path)
	if err != nil {
		return out, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || len(fields) > 4 {
			continue
		}
		sec, err1 := strconv.ParseInt(fields[0], 10, 64)
		micro, err2 := strconv.ParseInt(fields[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		t := time.Unix(sec, 0)
		if t.Before(from.Truncate(time.Second)) || t.After(to) {
			continue
		}
		switch {
		case len(fields) == 2 || fields[2] == outcomeWord[renewOK]:
			out.ok = append(out.ok, time.Duration(micro)*time.Microsecond)
		case fields[2] == outcomeWord[renewTimedOut]:
			out.timedOut++
		default:
			out.failed++
		}
		if len(fields) == 4 {
			if out.attempts == nil {
				out.attempts = map[string][]time.Time{}
			}
			out.attempts[fields[3]] = append(out.attempts[fields[3]], t)
		}
	}
	return out, sc.Err()
}

// missedRenewals counts the renewals the nodes did not attempt in [from,
// to] at one every interval: for each node, the renewals due in each gap
// between its attempts, and between the window's edges and its first and
// last, of more than one and a half intervals (a whole window for a node
// with none). A gap between two attempts holds d/interval - 1 renewals, one
// between an edge and an attempt d/interval - 1/2 (the renewal before the
// edge is 0 to 1 interval before it), a window without attempts
// d/interval. A renewal that failed or timed out was attempted; one that
// never went out (a node stopped, or its heartbeat stuck) is missed. The
// times are whole seconds, as the latency files have them.
func missedRenewals(attempts map[string][]time.Time, from, to time.Time, interval time.Duration) int {
	if interval <= 0 {
		return 0
	}
	missed := 0
	// gap adds the renewals due in d between bounds of which attempts are
	// attempts (the others the window's edges).
	gap := func(d time.Duration, attempts int) {
		if attempts > 0 && d <= interval*3/2 {
			return
		}
		missed += max(int(math.Round(float64(d)/float64(interval)-float64(attempts)/2)), 0)
	}
	from = from.Truncate(time.Second)
	for _, at := range attempts {
		if len(at) == 0 {
			gap(to.Sub(from), 0)
			continue
		}
		at = slices.Clone(at)
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		gap(at[0].Sub(from), 1)
		for i := 1; i < len(at); i++ {
			gap(at[i].Sub(at[i-1]), 2)
		}
		gap(to.Sub(at[len(at)-1]), 1)
	}
	return missed
}

// pss is a process's proportional set size (/proc/<pid>/smaps_rollup):
// pages shared by N processes count 1/N to each, so that N hollow nodes of
// one binary are not charged N times for its code.
func pss(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("no Pss in /proc/%d/smaps_rollup", pid)
}
