package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// latencies is one kind of measured request: the durations of those that
// succeeded and how many failed.
type latencies struct {
	ok     []time.Duration
	failed int
}

func (l *latencies) add(d time.Duration, err error) {
	if err != nil {
		l.failed++
		return
	}
	l.ok = append(l.ok, d)
}

// summary is a latency distribution as the report shows it: nearest-rank
// percentiles in milliseconds with the sample count.
type summary struct {
	N      int     `json:"n"`
	Failed int     `json:"failed"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
}

func (l *latencies) summary() summary {
	d := append([]time.Duration(nil), l.ok...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	s := summary{N: len(d), Failed: l.failed, P50: ms(percentile(d, 50)), P99: ms(percentile(d, 99))}
	if len(d) > 0 {
		s.Max = ms(d[len(d)-1])
	}
	return s
}

// cell is "p50/p99 (n)" in milliseconds, with the failures when there were
// any.
func (s summary) cell() string {
	if s.N == 0 && s.Failed == 0 {
		return "-"
	}
	c := fmt.Sprintf("%s/%s (%d)", fmtMS(s.P50), fmtMS(s.P99), s.N)
	if s.Failed > 0 {
		c += fmt.Sprintf(" %d failed", s.Failed)
	}
	return c
}

func fmtMS(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// percentile of sorted durations (p in 0..100) by nearest rank: the
// smallest sample that at least p% of the samples are at or below, so the
// p99 of fewer than 100 samples is their maximum; 0 when empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// majorFaults reads the major page faults of pid so far (/proc/<pid>/stat).
func majorFaults(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatMajflt(b)
}

// parseStatMajflt reads majflt (field 12) from a /proc/<pid>/stat line. The
// command name, field 2, is in parentheses and may hold spaces and
// parentheses, so the fields are counted from its last closing one.
func parseStatMajflt(b []byte) (int64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 10 { // f[0] is field 3 (state), f[9] field 12 (majflt)
		return 0, errors.New("short /proc stat")
	}
	return strconv.ParseInt(f[9], 10, 64)
}

// oomKill is one OOM kill the kernel logged.
type oomKill struct {
	Task, TaskMemcg, OOMMemcg string
	PID                       int
}

// parseOOMKills picks the kernel log's oom-kill lines ("oom-kill:
// constraint=...,oom_memcg=/x,task_memcg=/x/y,task=name,pid=N,uid=0") whose
// task was in a cgroup at or below root.
func parseOOMKills(log, root string) []oomKill {
	var out []oomKill
	for _, line := range strings.Split(log, "\n") {
		i := strings.Index(line, "oom-kill:")
		if i < 0 {
			continue
		}
		var k oomKill
		for _, kv := range strings.Split(line[i+len("oom-kill:"):], ",") {
			key, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				continue
			}
			switch key {
			case "task":
				k.Task = val
			case "task_memcg":
				k.TaskMemcg = val
			case "oom_memcg":
				k.OOMMemcg = val
			case "pid":
				k.PID, _ = strconv.Atoi(val)
			}
		}
		if k.TaskMemcg == root || strings.HasPrefix(k.TaskMemcg, root+"/") {
			out = append(out, k)
		}
	}
	return out
}
