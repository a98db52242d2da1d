package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hollowFlag makes the binary one hollow node instead of the driver: two
// kubelets in one Go process panic on duplicate metrics registration, so
// every node is its own process, this binary run again.
const hollowFlag = "-hollow"

// tokenEnv carries the node token to a hollow node (not its command line,
// which every user of the host can read).
const tokenEnv = "EDGEPLANE_HOLLOW_TOKEN"

// fleet is N hollow node processes.
type fleet struct {
	exe    string // the binary to run with hollowFlag
	dir    string // nodes' directories are <dir>/n<i>
	server string
	token  string
	prefix string // node names are <prefix>-<i>

	mu    sync.Mutex
	procs map[int]*exec.Cmd
	done  map[int]chan struct{}
}

func newFleet(exe, dir, server, token, prefix string) *fleet {
	return &fleet{exe: exe, dir: dir, server: server, token: token, prefix: prefix,
		procs: map[int]*exec.Cmd{}, done: map[int]chan struct{}{}}
}

func (f *fleet) name(i int) string    { return fmt.Sprintf("%s-%d", f.prefix, i) }
func (f *fleet) nodeDir(i int) string { return filepath.Join(f.dir, fmt.Sprintf("n%d", i)) }

// start launches node i; its output goes to <node dir>/hollow.log.
func (f *fleet) start(i int) error {
	dir := f.nodeDir(i)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(dir, "hollow.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(f.exe, hollowFlag, "-dir", dir, "-server", f.server, "-name", f.name(i))
	// GetHollowKubeletConfig makes its directories under TMPDIR: keep them
	// in the node's own directory.
	cmd.Env = append(os.Environ(), tokenEnv+"="+f.token, "TMPDIR="+dir, "GOMAXPROCS=1")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting hollow node %s: %w", f.name(i), err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(done)
	}()
	f.mu.Lock()
	f.procs[i], f.done[i] = cmd, done
	f.mu.Unlock()
	return nil
}

// startAll launches nodes 0..n-1, a few at a time so that n TLS bootstraps
// do not all land in the same second.
func (f *fleet) startAll(n int, every time.Duration) error {
	for i := range n {
		if err := f.start(i); err != nil {
			return err
		}
		time.Sleep(every)
	}
	return nil
}

// alive reports whether node i's process still runs.
func (f *fleet) alive(i int) bool {
	f.mu.Lock()
	done, ok := f.done[i]
	f.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// pids are the running nodes' process ids.
func (f *fleet) pids() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for i, c := range f.procs {
		if f.aliveLocked(i) {
			out = append(out, c.Process.Pid)
		}
	}
	return out
}

func (f *fleet) aliveLocked(i int) bool {
	select {
	case <-f.done[i]:
		return false
	default:
		return true
	}
}

// kill ends node i at once, as a node that loses power, and waits (at most
// 10 s) for the process to be gone.
func (f *fleet) kill(i int) error {
	f.mu.Lock()
	cmd, ok := f.procs[i]
	done := f.done[i]
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("no hollow node %d", i)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("hollow node %s (pid %d) still runs 10 s after SIGKILL", f.name(i), cmd.Process.Pid)
	}
}

// stop ends every node: SIGTERM (each writes its lease latencies), then
// SIGKILL for any still running after 10 s.
func (f *fleet) stop() error {
	f.mu.Lock()
	ids := make([]int, 0, len(f.procs))
	for i := range f.procs {
		ids = append(ids, i)
	}
	f.mu.Unlock()
	for _, i := range ids {
		f.mu.Lock()
		cmd := f.procs[i]
		f.mu.Unlock()
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(10 * time.Second)
	var errs []error
	for _, i := range ids {
		f.mu.Lock()
		done := f.done[i]
		f.mu.Unlock()
		select {
		case <-done:
		case <-deadline:
			if err := f.kill(i); err != nil {
				errs = append(errs, err)
			}
		}
	}
	f.removeRootDirs()
	return errors.Join(errs...)
}

// rootDirFile, in a node's dir, names the kubelet root dir kubemark made
// for it in /tmp.
const rootDirFile = "kubelet-root-dir"

// removeRootDirs removes the kubelet root dirs that the nodes, running or
// killed, recorded (only kubemark's own /tmp/hollow-kubelet.* dirs).
func (f *fleet) removeRootDirs() {
	files, _ := filepath.Glob(filepath.Join(f.dir, "n*", rootDirFile))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		if dir := string(b); strings.HasPrefix(dir, "/tmp/hollow-kubelet.") && !strings.Contains(dir, "..") {
			_ = os.RemoveAll(dir)
		}
	}
}

// logTail is the end of node i's log, for error messages.
func (f *fleet) logTail(i int) string {
	b, err := os.ReadFile(filepath.Join(f.nodeDir(i), "hollow.log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}
