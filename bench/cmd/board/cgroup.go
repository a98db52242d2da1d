package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupVersion is the cgroup interface the host gives the memory
// controller: v1 (a memory hierarchy of its own, memory.limit_in_bytes) or
// v2 (the unified hierarchy, memory.max).
type cgroupVersion int

const (
	cgroupV1 cgroupVersion = 1
	cgroupV2 cgroupVersion = 2
)

func (v cgroupVersion) String() string { return "v" + strconv.Itoa(int(v)) }

// cgroupHost is where the host mounts its cgroups: for v2 the unified
// hierarchy (root), for v1 one directory per hierarchy under root.
type cgroupHost struct {
	version cgroupVersion
	root    string
	// memory and cpu are the hierarchies of those controllers (the same
	// directory for v2); all lists every hierarchy (v1: cpuset, pids...,
	// where the kubelet wants its cgroup root too).
	memory, cpu string
	all         []string
}

// detectCgroups tells how the host under root (/sys/fs/cgroup) mounts its
// cgroups. The memory controller decides: a v1 memory hierarchy
// (root/memory/memory.limit_in_bytes) means v1 even when a unified
// hierarchy is mounted beside it (hybrid hosts); else root/cgroup.controllers
// naming memory means v2.
func detectCgroups(root string) (*cgroupHost, error) {
	if _, err := os.Stat(filepath.Join(root, "memory", "memory.limit_in_bytes")); err == nil {
		h := &cgroupHost{version: cgroupV1, root: root, memory: filepath.Join(root, "memory")}
		entries, err := os.ReadDir(root)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, e := range entries {
			dir := filepath.Join(root, e.Name())
			real, err := filepath.EvalSymlinks(dir)
			if err != nil || seen[real] {
				continue // cpu,cpuacct and its cpu and cpuacct links: one hierarchy
			}
			if _, err := os.Stat(filepath.Join(real, "cgroup.procs")); err != nil {
				continue
			}
			if e.Name() == "unified" {
				continue // the empty v2 hierarchy of a hybrid host
			}
			seen[real] = true
			h.all = append(h.all, dir)
			if _, err := os.Stat(filepath.Join(real, "cpu.cfs_quota_us")); err == nil && h.cpu == "" {
				h.cpu = dir
			}
		}
		if h.cpu == "" {
			return nil, fmt.Errorf("cgroup v1 at %s has no cpu hierarchy (cpu.cfs_quota_us): the CPU limit needs one", root)
		}
		return h, nil
	}
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("no cgroup memory controller under %s: neither %s nor %s", root,
			filepath.Join(root, "memory", "memory.limit_in_bytes"), filepath.Join(root, "cgroup.controllers"))
	}
	ctrls := strings.Fields(string(b))
	for _, want := range []string{"memory", "cpu"} {
		if !contains(ctrls, want) {
			return nil, fmt.Errorf("cgroup v2 at %s does not offer the %s controller (cgroup.controllers: %q)", root, want, strings.TrimSpace(string(b)))
		}
	}
	return &cgroupHost{version: cgroupV2, root: root, memory: root, cpu: root, all: []string{root}}, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// group is one cgroup of the benchmark, by its path below the hierarchies'
// roots ("/edgeplane-board-123/edgeplane").
type group struct {
	h    *cgroupHost
	path string
}

func (h *cgroupHost) group(path string) group { return group{h: h, path: path} }

func (g group) memDir() string { return filepath.Join(g.h.memory, g.path) }
func (g group) cpuDir() string { return filepath.Join(g.h.cpu, g.path) }

// create makes g in the memory and cpu hierarchies (every hierarchy with
// everywhere set: the kubelet wants its cgroup root in each). A new v1
// cpuset cgroup gets its parent's cpus and mems (it starts empty); a v2
// parent gets memory and cpu in cgroup.subtree_control.
func (g group) create(everywhere bool) error {
	dirs := []string{g.memDir(), g.cpuDir()}
	if everywhere {
		dirs = nil
		for _, hier := range g.h.all {
			dirs = append(dirs, filepath.Join(hier, g.path))
		}
	}
	for _, dir := range dirs {
		if g.h.version == cgroupV2 {
			if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "cgroup.subtree_control"), []byte("+memory +cpu"), 0o644); err != nil {
				return fmt.Errorf("enable memory and cpu below %s: %w", filepath.Dir(dir), err)
			}
		}
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("cgroup %s: %w", dir, err)
				}
			}
		}
	}
	return nil
}

// setMemoryLimit limits g's memory (with swap, where the host accounts it:
// a board has none) to bytes.
func (g group) setMemoryLimit(bytes int64) error {
	v := strconv.FormatInt(bytes, 10)
	if g.h.version == cgroupV2 {
		if err := os.WriteFile(filepath.Join(g.memDir(), "memory.max"), []byte(v), 0o644); err != nil {
			return err
		}
		// No swap: absent without swap accounting.
		if err := os.WriteFile(filepath.Join(g.memDir(), "memory.swap.max"), []byte("0"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.WriteFile(filepath.Join(g.memDir(), "memory.limit_in_bytes"), []byte(v), 0o644); err != nil {
		return err
	}
	// memsw must be at least the memory limit; absent without swap accounting.
	if err := os.WriteFile(filepath.Join(g.memDir(), "memory.memsw.limit_in_bytes"), []byte(v), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// cpuPeriod is the CFS period the quota is a share of.
const cpuPeriod = 100 * time.Millisecond

// setCPUShare limits g to share of one of this host's cores (CFS quota over
// a 100 ms period).
func (g group) setCPUShare(share float64) error {
	quota := int64(share * float64(cpuPeriod.Microseconds()))
	if quota < 1000 {
		return fmt.Errorf("CPU share %.3f is a quota of %d µs per %s; the kernel wants at least 1000 µs", share, quota, cpuPeriod)
	}
	if g.h.version == cgroupV2 {
		return os.WriteFile(filepath.Join(g.cpuDir(), "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, cpuPeriod.Microseconds())), 0o644)
	}
	if err := os.WriteFile(filepath.Join(g.cpuDir(), "cpu.cfs_period_us"), []byte(strconv.FormatInt(cpuPeriod.Microseconds(), 10)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(g.cpuDir(), "cpu.cfs_quota_us"), []byte(strconv.FormatInt(quota, 10)), 0o644)
}

// procsFiles are the cgroup.procs files a process writes its pid to, to
// join g (memory and cpu).
func (g group) procsFiles() []string {
	if g.h.version == cgroupV2 || g.memDir() == g.cpuDir() {
		return []string{filepath.Join(g.memDir(), "cgroup.procs")}
	}
	return []string{filepath.Join(g.memDir(), "cgroup.procs"), filepath.Join(g.cpuDir(), "cgroup.procs")}
}

// memStats is what a memory cgroup tells of itself.
type memStats struct {
	Usage, Peak int64 // bytes
	// OOMKills are the processes of this cgroup the OOM killer killed
	// (v1: memory.oom_control oom_kill, kernels 4.13+; v2: memory.events
	// oom_kill, which counts those of the cgroups below too); OOMs the
	// times the limit could not be met by reclaim; LimitHits the times
	// usage hit the limit (v1 memory.failcnt; v2 memory.events max).
	OOMKills, OOMs, LimitHits int64
	// Anon and File are the cgroup's anonymous and page-cache bytes, its
	// descendants' included (memory.stat).
	Anon, File int64
}

// readMemStats reads g's memory files.
func (g group) readMemStats() (memStats, error) { return readMemStatsDir(g.h.version, g.memDir()) }

func readMemStatsDir(v cgroupVersion, dir string) (memStats, error) {
	var s memStats
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		return string(b), err
	}
	var errs []error
	num := func(name string) int64 {
		b, err := read(name)
		if err != nil {
			errs = append(errs, err)
			return 0
		}
		n, err := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(dir, name), err))
		}
		return n
	}
	stat, err := read("memory.stat")
	if err != nil {
		return s, err
	}
	kv, err := parseKeyValues(stat)
	if err != nil {
		return s, fmt.Errorf("%s/memory.stat: %w", dir, err)
	}
	if v == cgroupV2 {
		s.Usage = num("memory.current")
		if _, err := os.Stat(filepath.Join(dir, "memory.peak")); err == nil { // 5.19+
			s.Peak = num("memory.peak")
		}
		ev, err := read("memory.events")
		if err != nil {
			return s, err
		}
		events, err := parseKeyValues(ev)
		if err != nil {
			return s, fmt.Errorf("%s/memory.events: %w", dir, err)
		}
		s.OOMKills, s.OOMs, s.LimitHits = events["oom_kill"], events["oom"], events["max"]
		s.Anon, s.File = kv["anon"], kv["file"]
		return s, errors.Join(errs...)
	}
	s.Usage = num("memory.usage_in_bytes")
	s.Peak = num("memory.max_usage_in_bytes")
	s.LimitHits = num("memory.failcnt")
	oc, err := read("memory.oom_control")
	if err != nil {
		return s, err
	}
	ctl, err := parseKeyValues(oc)
	if err != nil {
		return s, fmt.Errorf("%s/memory.oom_control: %w", dir, err)
	}
	if _, ok := ctl["oom_kill"]; !ok {
		errs = append(errs, fmt.Errorf("%s/memory.oom_control has no oom_kill counter (a kernel before 4.13): OOM kills are counted from the kernel log only", dir))
	}
	s.OOMKills = ctl["oom_kill"]
	// v1 counts no OOM events apart from kills; under_oom is whether the
	// cgroup is in one now.
	s.OOMs = ctl["under_oom"]
	s.Anon, s.File = kv["total_rss"], kv["total_cache"]
	return s, errors.Join(errs...)
}

// parseKeyValues parses the "key value" lines of memory.stat,
// memory.events and memory.oom_control.
func parseKeyValues(s string) (map[string]int64, error) {
	out := map[string]int64{}
	for i, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: %q is not \"key value\"", i+1, line)
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %q: %w", i+1, line, err)
		}
		out[f[0]] = n
	}
	return out, nil
}

// oomKillsBelow sums the OOM kills of every cgroup at and below g's memory
// directory (the pods' cgroups come and go; the caller keeps the largest
// count seen per cgroup).
func (g group) oomKillsBelow(seen map[string]int64) {
	_ = filepath.WalkDir(g.memDir(), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		s, _ := readMemStatsDir(g.h.version, p)
		if s.OOMKills > seen[p] {
			seen[p] = s.OOMKills
		}
		return nil
	})
}

// remove kills what is left in g's cgroups (all the benchmark's own
// processes: edgeplane, containerd, shims, pods) and removes them, deepest
// first, in every hierarchy.
func (g group) remove() error {
	var errs []error
	for _, hier := range g.h.all {
		top := filepath.Join(hier, g.path)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			var err error
			for try := 0; try < 50; try++ {
				killProcs(dirs[i])
				if err = os.Remove(dirs[i]); err == nil || errors.Is(err, os.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func killProcs(dir string) {
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && pid > 1 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// throttled is "N of M periods" from g's cpu.stat: how often the quota
// held edgeplane back; "" when unreadable.
func (g group) throttled() string {
	b, err := os.ReadFile(filepath.Join(g.cpuDir(), "cpu.stat"))
	if err != nil {
		return ""
	}
	kv := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			kv[f[0]], _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return fmt.Sprintf("%d of %d periods", kv["nr_throttled"], kv["nr_periods"])
}
