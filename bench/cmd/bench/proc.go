package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// proc is one child process of a configuration, its output in a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	out     *lineWatcher
	done    chan struct{} // closed when the process has exited
	err     error         // exit status, valid after done
}

// startProc starts bin with args; stdout and stderr go to logPath.
func startProc(name, bin string, args []string, env []string, logPath string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	lw := &lineWatcher{w: f}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = lw
	cmd.Stderr = lw
	// Children die with the benchmark.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, out: lw, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to timeout, then kills.
func (p *proc) stop(timeout time.Duration) error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s; killed", p.name, timeout)
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// lineWatcher copies output to w and records when a line containing a
// watched substring was first written.
type lineWatcher struct {
	w       *os.File
	mu      sync.Mutex
	partial []byte
	watch   []string
	seen    map[string]time.Time
}

func (l *lineWatcher) Write(b []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.watch) > 0 {
		l.partial = append(l.partial, b...)
		for {
			i := bytes.IndexByte(l.partial, '\n')
			if i < 0 {
				break
			}
			line := l.partial[:i]
			for _, s := range l.watch {
				if _, ok := l.seen[s]; !ok && bytes.Contains(line, []byte(s)) {
					l.seen[s] = now
				}
			}
			l.partial = l.partial[i+1:]
		}
	}
	return l.w.Write(b)
}

// watchFor makes the watcher record the first line containing s.
func (l *lineWatcher) watchFor(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]time.Time{}
	}
	l.watch = append(l.watch, s)
}

func (l *lineWatcher) seenAt(s string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.seen[s]
	return t, ok
}

// memory is a process's (or a sum of processes') memory from smaps_rollup, in bytes.
type memory struct {
	RSS, PSS, PSSAnon, PSSFile int64
}

func (m memory) add(o memory) memory {
	return memory{m.RSS + o.RSS, m.PSS + o.PSS, m.PSSAnon + o.PSSAnon, m.PSSFile + o.PSSFile}
}

func readMemory(pid int) (memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return memory{}, err
	}
	defer f.Close()
	return parseSmapsRollup(f)
}

func parseSmapsRollup(f interface{ Read([]byte) (int, error) }) (memory, error) {
	var m memory
	found := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || fields[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Rss:":
			m.RSS, found = kb*1024, true
		case "Pss:":
			m.PSS = kb * 1024
		case "Pss_Anon:":
			m.PSSAnon = kb * 1024
		case "Pss_File:":
			m.PSSFile = kb * 1024
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if !found {
		return m, errors.New("no Rss in smaps_rollup")
	}
	return m, nil
}

// ioCounters are a process's /proc/<pid>/io counters and CPU time.
type ioCounters struct {
	WriteBytes, CancelledWriteBytes, WChar int64
	CPU                                    time.Duration // utime+stime
}

func (c ioCounters) sub(o ioCounters) ioCounters {
	return ioCounters{c.WriteBytes - o.WriteBytes, c.CancelledWriteBytes - o.CancelledWriteBytes, c.WChar - o.WChar, c.CPU - o.CPU}
}

func (c ioCounters) add(o ioCounters) ioCounters {
	return ioCounters{c.WriteBytes + o.WriteBytes, c.CancelledWriteBytes + o.CancelledWriteBytes, c.WChar + o.WChar, c.CPU + o.CPU}
}

func readIO(pid int) (ioCounters, error) {
	io, err := procfs.ReadIO(pid)
	if err != nil {
		return ioCounters{}, err
	}
	c := ioCounters{WriteBytes: io.WriteBytes, CancelledWriteBytes: io.CancelledWriteBytes, WChar: io.WChar}
	c.CPU, err = procfs.CPUTime(pid)
	return c, err
}

// cpu is the CPU time the instance's processes used so far (counters
// without its I/O figures; a process it cannot read counts 0).
func (in *instance) cpu() time.Duration {
	c, _ := in.counters()
	return c.CPU
}

// rss is the instance's processes' RSS summed, from /proc/<pid>/status (cheap
// enough to sample often, unlike smaps_rollup); a process it cannot read
// counts 0.
func (in *instance) rss() (int64, error) {
	var sum int64
	for _, pid := range in.pids() {
		if v, err := procfs.RSS(pid); err == nil {
			sum += v
		}
	}
	return sum, nil
}

// dirSize is the disk space used by the files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}
