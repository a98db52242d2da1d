package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// writeTree makes files (path -> content) under a new directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestDetectCgroups(t *testing.T) {
	v1 := map[string]string{
		"memory/memory.limit_in_bytes": "9223372036854771712\n", "memory/cgroup.procs": "",
		"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cgroup.procs": "",
		"cpuset/cgroup.procs": "", "pids/cgroup.procs": "",
	}
	hybrid := map[string]string{"unified/cgroup.procs": "", "unified/cgroup.controllers": ""}
	for k, v := range v1 {
		hybrid[k] = v
	}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		version cgroupVersion
		all     []string // relative to the root
		err     string
	}{
		{name: "v1", files: v1, version: cgroupV1, all: []string{"cpu", "cpuset", "memory", "pids"}},
		{name: "hybrid: the v1 memory hierarchy decides, unified is left out", files: hybrid, version: cgroupV1, all: []string{"cpu", "cpuset", "memory", "pids"}},
		{name: "v2", files: map[string]string{"cgroup.controllers": "cpuset cpu io memory pids\n", "cgroup.procs": ""}, version: cgroupV2, all: []string{"."}},
		{name: "v2 without memory", files: map[string]string{"cgroup.controllers": "cpuset cpu io pids\n"}, err: "does not offer the memory controller"},
		{name: "v1 without cpu", files: map[string]string{"memory/memory.limit_in_bytes": "1", "memory/cgroup.procs": ""}, err: "no cpu hierarchy"},
		{name: "no cgroups", files: map[string]string{"x": ""}, err: "no cgroup memory controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := writeTree(t, tc.files)
			h, err := detectCgroups(root)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.version != tc.version {
				t.Errorf("version %s, want %s", h.version, tc.version)
			}
			var all []string
			for _, d := range h.all {
				rel, _ := filepath.Rel(root, d)
				all = append(all, rel)
			}
			if !reflect.DeepEqual(all, tc.all) {
				t.Errorf("hierarchies %v, want %v", all, tc.all)
			}
			if _, err := os.Stat(filepath.Join(h.memory, map[cgroupVersion]string{cgroupV1: "memory.limit_in_bytes", cgroupV2: "cgroup.controllers"}[tc.version])); err != nil {
				t.Errorf("memory hierarchy %s: %v", h.memory, err)
			}
		})
	}
}

func TestReadMemStats(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version cgroupVersion
		files   map[string]string
		want    memStats
		err     string
	}{
		{
			name: "v1", version: cgroupV1,
			files: map[string]string{
				"memory.usage_in_bytes": "104857600\n", "memory.max_usage_in_bytes": "209715200\n", "memory.failcnt": "7\n",
				"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
				"memory.stat":        "cache 1\nrss 2\ntotal_cache 3145728\ntotal_rss 4194304\n",
			},
			want: memStats{Usage: 100 << 20, Peak: 200 << 20, LimitHits: 7, OOMKills: 2, Anon: 4 << 20, File: 3 << 20},
		},
		{
			name: "v1 kernel without the oom_kill counter", version: cgroupV1,
			files: map[string]string{
				"memory.usage_in_bytes": "1\n", "memory.max_usage_in_bytes": "1\n", "memory.failcnt": "0\n",
				"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n", "memory.stat": "total_rss 1\n",
			},
			want: memStats{Usage: 1, Peak: 1, Anon: 1},
			err:  "no oom_kill counter",
		},
		{
			name: "v2", version: cgroupV2,
			files: map[string]string{
				"memory.current": "1048576\n", "memory.peak": "2097152\n",
				"memory.events": "low 0\nhigh 0\nmax 5\noom 1\noom_kill 3\noom_group_kill 0\n",
				"memory.stat":   "anon 4096\nfile 8192\nkernel 1\n",
			},
			want: memStats{Usage: 1 << 20, Peak: 2 << 20, LimitHits: 5, OOMs: 1, OOMKills: 3, Anon: 4096, File: 8192},
		},
		{
			name: "malformed memory.events", version: cgroupV2,
			files: map[string]string{"memory.current": "1\n", "memory.events": "oom_kill three\n", "memory.stat": "anon 1\n"},
			err:   "memory.events",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTree(t, tc.files)
			got, err := readMemStatsDir(tc.version, dir)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one with %q", err, tc.err)
				}
				if tc.want == (memStats{}) {
					return
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	for _, v := range []cgroupVersion{cgroupV1, cgroupV2} {
		t.Run(v.String(), func(t *testing.T) {
			root := t.TempDir()
			h := &cgroupHost{version: v, root: root, memory: filepath.Join(root, "memory"), cpu: filepath.Join(root, "cpu")}
			if v == cgroupV2 {
				h.memory, h.cpu = root, root
			}
			g := h.group("/b")
			for _, d := range []string{g.memDir(), g.cpuDir()} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := g.setMemoryLimit(256 << 20); err != nil {
				t.Fatal(err)
			}
			if err := g.setCPUShare(0.35); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"memory/b/memory.limit_in_bytes": "268435456", "cpu/b/cpu.cfs_quota_us": "35000", "cpu/b/cpu.cfs_period_us": "100000"}
			if v == cgroupV2 {
				want = map[string]string{"b/memory.max": "268435456", "b/cpu.max": "35000 100000"}
			}
			for p, w := range want {
				b, err := os.ReadFile(filepath.Join(root, p))
				if err != nil || string(b) != w {
					t.Errorf("%s: %q (%v), want %q", p, b, err, w)
				}
			}
			if err := g.setCPUShare(0.001); err == nil || !strings.Contains(err.Error(), "at least 1000 µs") {
				t.Errorf("a 100 µs quota: err %v, want a refusal", err)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	seq := func(n int) []time.Duration {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = time.Duration(i+1) * time.Millisecond
		}
		return d
	}
	for _, tc := range []struct {
		n    int
		p    float64
		want time.Duration
	}{
		{0, 50, 0},
		{1, 99, time.Millisecond},
		{10, 50, 5 * time.Millisecond},    // rank ceil(5) = 5
		{10, 99, 10 * time.Millisecond},   // fewer than 100 samples: the maximum
		{200, 99, 198 * time.Millisecond}, // rank ceil(198) = 198
		{201, 50, 101 * time.Millisecond}, // rank ceil(100.5) = 101
	} {
		if got := percentile(seq(tc.n), tc.p); got != tc.want {
			t.Errorf("p%v of 1..%d ms = %v, want %v", tc.p, tc.n, got, tc.want)
		}
	}
	var l latencies
	for _, d := range seq(10) {
		l.add(d, nil)
	}
	l.add(time.Hour, os.ErrDeadlineExceeded)
	if s := l.summary(); s.N != 10 || s.Failed != 1 || s.P50 != 5 || s.P99 != 10 || s.Max != 10 {
		t.Errorf("summary %+v: want n 10, 1 failed, p50 5, p99 10, max 10 (a failure is no sample)", s)
	}
}

func TestParseStatMajflt(t *testing.T) {
	// Fields 3.. after the command name: state ppid pgrp session tty_nr
	// tpgid flags minflt cminflt majflt(12) cmajflt utime stime...
	line := "4242 (edge (plane) x) S 1 4242 4242 0 -1 4194560 91234 17 321 5 700 300 0 0 20 0 40 0\n"
	got, err := parseStatMajflt([]byte(line))
	if err != nil || got != 321 {
		t.Errorf("majflt %d (%v), want 321", got, err)
	}
	if _, err := parseStatMajflt([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a short stat line parsed")
	}
	if _, err := parseStatMajflt([]byte("4242 x S")); err == nil {
		t.Error("a stat line without a command name parsed")
	}
}

func TestParseOOMKills(t *testing.T) {
	log := `[  10.1] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/edgeplane-board-7-0,task_memcg=/edgeplane-board-7-0/pods/kubepods/besteffort/pod1/abc,task=httpd,pid=311,uid=0
[  10.2] Memory cgroup out of memory: Killed process 311 (httpd) total-vm:1000kB
[  11.0] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/edgeplane-board-7-0/edgeplane,task_memcg=/edgeplane-board-7-0/edgeplane,task=edgeplane,pid=99,uid=0
[  12.0] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/edgeplane-board-7-01,task_memcg=/edgeplane-board-7-01/edgeplane,task=edgeplane,pid=98,uid=0
[  13.0] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/other,task=x,pid=5,uid=0
`
	got := parseOOMKills(log, "/edgeplane-board-7-0")
	want := []oomKill{
		{Task: "httpd", TaskMemcg: "/edgeplane-board-7-0/pods/kubepods/besteffort/pod1/abc", OOMMemcg: "/edgeplane-board-7-0", PID: 311},
		{Task: "edgeplane", TaskMemcg: "/edgeplane-board-7-0/edgeplane", OOMMemcg: "/edgeplane-board-7-0/edgeplane", PID: 99},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestParseConfigs(t *testing.T) {
	got, err := parseConfigs("edgeplane:512:default, board:384:small")
	if err != nil {
		t.Fatal(err)
	}
	want := []config{
		{Name: "edgeplane-512MiB-default", Scope: scopeEdgeplane, LimitMiB: 512, Profile: "default"},
		{Name: "board-384MiB-small", Scope: scopeBoard, LimitMiB: 384, Profile: "small"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for in, msg := range map[string]string{
		"edgeplane:512":        "not scope:MiB:profile",
		"node:512:small":       "scope \"node\"",
		"edgeplane:lots:small": "not a number of MiB",
		"edgeplane:32:small":   "at least 64",
		"edgeplane:256:tiny":   "profile \"tiny\"",
		" , ":                  "no configuration",
	} {
		if _, err := parseConfigs(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: err %v, want one with %q", in, err, msg)
		}
	}
}

func TestFaultRates(t *testing.T) {
	// 12 faults a minute (one per 5 s sample), then a burst of 100 within 30 s.
	var s []sample
	for i := 0; i <= 24; i++ {
		s = append(s, sample{T: float64(i * 5), Majflt: int64(i)})
	}
	last := s[len(s)-1]
	s = append(s, sample{T: last.T + 30, Majflt: last.Majflt + 100})
	mean, worst := faultRates(s, 0, 120)
	if mean < 11.9 || mean > 12.1 {
		t.Errorf("mean over the first two minutes %.2f/min, want 12", mean)
	}
	if worst < 11.9 || worst > 12.1 {
		t.Errorf("worst over the first two minutes %.2f/min, want 12", worst)
	}
	_, worst = faultRates(s, 0, 200)
	if worst < 150 {
		t.Errorf("worst minute with the burst %.2f/min, want >= 150 (the burst's 100 in 30 s, as a rate)", worst)
	}
}

func TestReadAheadDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a loop device and a mount")
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	bin := filepath.Join(t.TempDir(), "edgeplane")
	want := bytes.Repeat([]byte("edgeplane"), 100_000)
	if err := os.WriteFile(bin, want, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := newReadAheadDisk(bin, 128)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(d.bin)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("the binary's copy: %d bytes (err %v), want the %d of the original", len(got), err, len(want))
	}
	if kb := hostReadAheadKB(d.bin); kb != 128 {
		t.Errorf("the copy's disk reads ahead %d KiB, want 128", kb)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.dir); !os.IsNotExist(err) {
		t.Errorf("after Close, %s: %v, want it removed", d.dir, err)
	}
	if out, _ := exec.Command("losetup", "-j", filepath.Join(d.dir, "disk.img")).Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("after Close the loop device is still attached: %s", out)
	}
}
