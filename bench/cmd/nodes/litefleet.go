package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// liteFleet is N lite nodes in processes of at most perProc nodes each
// (this binary run again with liteFlag). The driver and a process talk in
// lines: the driver writes "kill <i>" to its stdin; the process writes
// "ready <i>", "failed <i> <reason>" and "killed <i>" to its stdout. Its
// log (stderr) is <dir>/p<k>/lite.log.
type liteFleet struct {
	exe     string
	dir     string
	server  string
	token   string
	prefix  string
	perProc int

	mu     sync.Mutex
	procs  []*liteProc
	ready  map[int]bool
	failed map[int]string
	killed map[int]chan struct{} // closed when the process said "killed <i>"
}

// liteProc is one process of lite nodes first..first+count-1.
type liteProc struct {
	first, count int
	dir          string
	cmd          *exec.Cmd
	stdin        io.WriteCloser
	done         chan struct{}
}

func newLiteFleet(exe, dir, server, token, prefix string, perProc int) *liteFleet {
	return &liteFleet{exe: exe, dir: dir, server: server, token: token, prefix: prefix, perProc: max(perProc, 1),
		ready: map[int]bool{}, failed: map[int]string{}, killed: map[int]chan struct{}{}}
}

func (f *liteFleet) name(i int) string { return liteNodeName(f.prefix, i) }

// startAll starts ceil(n/perProc) processes. Each paces its own nodes'
// joins so that together they start one node every `every`.
func (f *liteFleet) startAll(n int, every time.Duration) error {
	nprocs := (n + f.perProc - 1) / f.perProc
	for p := range nprocs {
		first := p * f.perProc
		if err := f.startProc(first, min(f.perProc, n-first), every*time.Duration(nprocs)); err != nil {
			return err
		}
	}
	return nil
}

func (f *liteFleet) startProc(first, count int, every time.Duration) error {
	dir := filepath.Join(f.dir, fmt.Sprintf("p%d", len(f.procs)))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(dir, "lite.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(f.exe, liteFlag, "-dir", dir, "-server", f.server, "-prefix", f.prefix,
		"-first", strconv.Itoa(first), "-count", strconv.Itoa(count), "-start-every", every.String())
	cmd.Env = append(os.Environ(), tokenEnv+"="+f.token)
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		_ = log.Close()
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = log.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting lite nodes %d..%d: %w", first, first+count-1, err)
	}
	p := &liteProc{first: first, count: count, dir: dir, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	events := make(chan struct{})
	go func() {
		defer close(events)
		f.readEvents(stdout)
	}()
	go func() {
		<-events // Wait must not close stdout before the last line is read
		_ = cmd.Wait()
		_ = log.Close()
		close(p.done)
	}()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return nil
}

// readEvents reads a process's event lines until it exits.
func (f *liteFleet) readEvents(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		word, rest, _ := strings.Cut(sc.Text(), " ")
		idx, reason, _ := strings.Cut(rest, " ")
		i, err := strconv.Atoi(idx)
		if err != nil {
			continue
		}
		f.mu.Lock()
		switch word {
		case "ready":
			f.ready[i] = true
		case "failed":
			f.failed[i] = reason
		case "killed":
			if ch, ok := f.killed[i]; ok {
				select {
				case <-ch:
				default:
					close(ch)
				}
			}
		}
		f.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
}

// procOf is the process that runs node i (nil if none).
func (f *liteFleet) procOf(i int) *liteProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.procs {
		if i >= p.first && i < p.first+p.count {
			return p
		}
	}
	return nil
}

func (f *liteFleet) alive(i int) bool {
	p := f.procOf(i)
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, failed := f.failed[i]
	_, killed := f.killed[i]
	return !failed && !killed
}

// kill asks node i's process to stop the node and waits (at most 10 s)
// until it says it did.
func (f *liteFleet) kill(i int) error {
	p := f.procOf(i)
	if p == nil {
		return fmt.Errorf("no lite node %d", i)
	}
	f.mu.Lock()
	ch, ok := f.killed[i]
	if !ok {
		ch = make(chan struct{})
		f.killed[i] = ch
	}
	f.mu.Unlock()
	if _, err := fmt.Fprintf(p.stdin, "kill %d\n", i); err != nil {
		return fmt.Errorf("lite node %s: %w", f.name(i), err)
	}
	select {
	case <-ch:
		return nil
	case <-p.done:
		return fmt.Errorf("lite node %s: its process exited", f.name(i))
	case <-time.After(10 * time.Second):
		return fmt.Errorf("lite node %s not stopped 10 s after the kill", f.name(i))
	}
}

// stop ends every process: SIGTERM (each writes its lease latencies), then
// SIGKILL for any still running after 10 s.
func (f *liteFleet) stop() error {
	f.mu.Lock()
	procs := append([]*liteProc(nil), f.procs...)
	f.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(10 * time.Second)
	var errs []error
	for _, p := range procs {
		select {
		case <-p.done:
			continue
		case <-deadline:
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("lite nodes process %d still runs 10 s after SIGKILL", p.cmd.Process.Pid))
		}
	}
	return errors.Join(errs...)
}

func (f *liteFleet) pids() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, p := range f.procs {
		select {
		case <-p.done:
		default:
			out = append(out, p.cmd.Process.Pid)
		}
	}
	return out
}

func (f *liteFleet) logTail(i int) string {
	p := f.procOf(i)
	if p == nil {
		return "no process runs it"
	}
	f.mu.Lock()
	reason, failed := f.failed[i]
	f.mu.Unlock()
	var b strings.Builder
	if failed {
		fmt.Fprintf(&b, "%s failed: %s\n", f.name(i), reason)
	}
	log, err := os.ReadFile(filepath.Join(p.dir, "lite.log"))
	if err != nil {
		return b.String() + err.Error()
	}
	if len(log) > 3000 {
		log = log[len(log)-3000:]
	}
	return b.String() + string(log)
}

func (f *liteFleet) latencyFiles() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.procs))
	for _, p := range f.procs {
		out = append(out, filepath.Join(p.dir, leaseLatencyFile))
	}
	return out
}
