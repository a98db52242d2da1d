// Package containerd runs a node's own containerd: it finds the binary
// (beside edgeplane, from a release folder, or on the PATH), generates its
// configuration under <data-dir>/agent/containerd, starts it as a
// supervised child process, restarts it when it dies and stops it on
// shutdown, without taking the running containers with it.
//
//	c, err := containerd.New(containerd.Config{Dir: dir, SandboxImage: img, ...})
//	c.Start(ctx)  // config.toml written, containerd started
//	c.Ready(ctx)  // its socket answers CRI Version
//	c.Stop(ctx)   // SIGTERM, SIGKILL after StopTimeout
//
// Containers outlive containerd: each is run by its shim
// (containerd-shim-runc-v2), which containerd starts in a process group of
// its own and which is reparented away from containerd at once. A
// restarted containerd over the same root and state finds its shims
// again. What ties containerd to edgeplane:
//
//   - Setpgid: containerd leads a process group of its own, so a signal to
//     edgeplane's group (Ctrl-C in a terminal) reaches edgeplane alone, which
//     then stops the node's parts in order and containerd last.
//   - Pdeathsig SIGTERM: when edgeplane dies without stopping it (SIGKILL,
//     a crash), the kernel sends containerd SIGTERM, its clean shutdown,
//     which leaves the shims and containers running. The signal is tied to
//     the thread that forked containerd: the supervising goroutine locks its
//     OS thread for containerd's whole life, so that Go never ends that
//     thread under it.
//   - containerd.pid: should a containerd of an earlier run still be there
//     (its edgeplane died without the signal reaching it), Start stops it
//     before starting its own over the same root and state.
//
// systemd must not kill the unit's whole cgroup on stop (install.sh's unit
// has KillMode=process), or the shims and containers die with edgeplane.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/component"
)

// Config is one managed containerd.
type Config struct {
	// Dir is its directory, <data-dir>/agent/containerd: config.toml,
	// config.toml.tmpl, root/, state/, containerd.sock, certs.d/,
	// containerd.log.
	Dir string
	// Binary is the containerd to run; nil: FindBinary.
	Binary *Binary
	// CgroupDriver is the kubelet's, "cgroupfs" or "systemd"; runc's must
	// be the same.
	CgroupDriver string
	// SandboxImage is the CRI plugin's sandbox (pause) image.
	SandboxImage string
	// CNIBinDir and CNIConfDir are the node's CNI plugins and network
	// configuration.
	CNIBinDir  string
	CNIConfDir string
	// RegistryHostsDir is the certs.d tree of <host>/hosts.toml files;
	// empty: <Dir>/certs.d.
	RegistryHostsDir string
	// RegistryAuths are registries' credentials.
	RegistryAuths []RegistryAuth
	// WriteRegistryHosts, when set, writes the hosts.toml tree into
	// RegistryHostsDir at every Start, before containerd starts (nothing
	// is written before: an agent writes nothing until it has joined).
	WriteRegistryHosts func(dir string) error
	// Snapshotter is the CRI plugin's snapshotter; empty: overlayfs when an
	// overlay mount works under <Dir>/root, else native.
	Snapshotter string
	// LogMaxBytes caps containerd.log; 0: DefaultLogMaxBytes.
	LogMaxBytes int64
	// ReadyTimeout bounds the wait for the first answer on the socket;
	// 0: a minute.
	ReadyTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL;
	// 0: 10 s.
	StopTimeout time.Duration
}

// Restart back-off: the first restart comes after minBackoff, each quick
// death doubles it up to maxBackoff; a containerd that ran stableAfter
// starts the series again.
const (
	minBackoff  = 500 * time.Millisecond
	maxBackoff  = 30 * time.Second
	stableAfter = time.Minute
)

// Containerd is a managed containerd: a component and an Ender (it ends
// when it can no longer be started at all).
type Containerd struct {
	component.Status

	cfg        Config
	binary     *Binary
	configPath string
	socket     string
	pidPath    string

	mu       sync.Mutex
	logger   logr.Logger
	log      *logFile
	proc     *os.Process
	stopping bool
	stopCh   chan struct{}
	loopDone chan struct{}
	starts   int
}

var (
	_ component.Component = (*Containerd)(nil)
	_ component.Ender     = (*Containerd)(nil)
)

// New checks cfg, finds the binary when none is given and checks its
// version and the socket path; nothing is written or started until Start.
func New(ctx context.Context, cfg Config) (*Containerd, error) {
	if cfg.Dir == "" {
		return nil, errors.New("containerd: a directory is required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("containerd: %w", err)
	}
	cfg.Dir = dir
	switch cfg.CgroupDriver {
	case "cgroupfs", "systemd":
	default:
		return nil, fmt.Errorf("containerd: cgroup driver %q: want cgroupfs or systemd", cfg.CgroupDriver)
	}
	if cfg.SandboxImage == "" || cfg.CNIBinDir == "" || cfg.CNIConfDir == "" {
		return nil, errors.New("containerd: a sandbox image and the CNI directories are required")
	}
	if cfg.RegistryHostsDir == "" {
		cfg.RegistryHostsDir = filepath.Join(dir, CertsDir)
	}
	if cfg.LogMaxBytes == 0 {
		cfg.LogMaxBytes = DefaultLogMaxBytes
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = time.Minute
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	c := &Containerd{
		cfg:        cfg,
		binary:     cfg.Binary,
		configPath: filepath.Join(dir, ConfigFile),
		socket:     filepath.Join(dir, SocketFile),
		pidPath:    filepath.Join(dir, PIDFile),
		stopCh:     make(chan struct{}),
	}
	if err := checkSocketPath(c.socket); err != nil {
		return nil, err
	}
	if c.binary == nil {
		if c.binary, err = FindBinary(ctx); err != nil {
			return nil, err
		}
	} else if err := checkVersion(c.binary.Path, c.binary.Version); err != nil {
		return nil, err
	}
	return c, nil
}

// Name implements component.Component.
func (c *Containerd) Name() string { return "containerd" }

// Endpoint is the CRI (and containerd API) socket, unix:///path.
func (c *Containerd) Endpoint() string { return "unix://" + c.socket }

// Socket is the socket's path.
func (c *Containerd) Socket() string { return c.socket }

// CgroupDriver is the cgroup driver runc is configured with.
func (c *Containerd) CgroupDriver() string { return c.cfg.CgroupDriver }

// Binary is the containerd that runs.
func (c *Containerd) Binary() *Binary { return c.binary }

// PID is the running containerd's process id; 0 when none runs.
func (c *Containerd) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return 0
	}
	return c.proc.Pid
}

// Starts is how many times containerd was started (1 + restarts).
func (c *Containerd) Starts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starts
}

// templateData is what config.toml is rendered from.
func (c *Containerd) templateData(snapshotter string) TemplateData {
	return TemplateData{
		Root:               filepath.Join(c.cfg.Dir, RootDir),
		State:              filepath.Join(c.cfg.Dir, StateDir),
		Socket:             c.socket,
		SandboxImage:       c.cfg.SandboxImage,
		SystemdCgroup:      c.cfg.CgroupDriver == "systemd",
		Snapshotter:        snapshotter,
		CNIBinDir:          c.cfg.CNIBinDir,
		CNIConfDir:         c.cfg.CNIConfDir,
		RegistryConfigPath: c.cfg.RegistryHostsDir,
		RegistryAuths:      c.cfg.RegistryAuths,
	}
}

// Start writes config.toml (when it changed), stops a containerd an
// earlier run left over the same directory, and starts containerd.
func (c *Containerd) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("containerd")
	snapshotter, why := c.cfg.Snapshotter, "configured"
	if snapshotter == "" {
		snapshotter, why = chooseSnapshotter(filepath.Join(c.cfg.Dir, RootDir))
	}
	content, err := Render(c.templateData(snapshotter), filepath.Join(c.cfg.Dir, TemplateFile))
	if err != nil {
		return err
	}
	changed, err := writeConfig(c.configPath, content)
	if err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	if err := os.MkdirAll(c.cfg.RegistryHostsDir, 0o700); err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	if c.cfg.WriteRegistryHosts != nil {
		if err := c.cfg.WriteRegistryHosts(c.cfg.RegistryHostsDir); err != nil {
			return fmt.Errorf("containerd: registry hosts in %s: %w", c.cfg.RegistryHostsDir, err)
		}
	}
	logger.Info("containerd configuration", "config", c.configPath, "changed", changed, "binary", c.binary.Path,
		"version", c.binary.Version, "snapshotter", snapshotter, "why", why, "cgroupDriver", c.cfg.CgroupDriver)
	if err := c.stopLeftover(ctx, logger); err != nil {
		return err
	}
	log, err := openLog(filepath.Join(c.cfg.Dir, LogFile), c.cfg.LogMaxBytes)
	if err != nil {
		return fmt.Errorf("containerd: log file: %w", err)
	}
	c.mu.Lock()
	c.logger, c.log, c.loopDone = logger, log, make(chan struct{})
	c.mu.Unlock()
	started := make(chan error, 1)
	go c.supervise(started)
	return <-started
}

// command is one run of containerd.
func (c *Containerd) command() *exec.Cmd {
	cmd := exec.Command(c.binary.Path, "--config", c.configPath)
	cmd.Env = childEnv(os.Environ(), filepath.Dir(c.binary.Path))
	cmd.Stdout, cmd.Stderr = c.log, c.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// Should anything containerd started keep its output pipe open, Wait
	// returns anyway.
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// childEnv is containerd's environment: edgeplane's, with the directory
// of the containerd binary first on the PATH (the shim and runc a release
// folder ships beside it come first) and without NOTIFY_SOCKET (containerd
// notifies systemd when it is ready: that is edgeplane's to say, once the
// node is ready).
func childEnv(environ []string, binDir string) []string {
	out := make([]string, 0, len(environ)+1)
	path := binDir
	for _, kv := range environ {
		switch {
		case strings.HasPrefix(kv, "NOTIFY_SOCKET="):
		case strings.HasPrefix(kv, "PATH="):
			if rest := strings.TrimPrefix(kv, "PATH="); rest != "" {
				path += string(os.PathListSeparator) + rest
			}
		default:
			out = append(out, kv)
		}
	}
	return append(out, "PATH="+path)
}

// supervise runs containerd until Stop, restarting it when it dies. The
// first start's error goes to started.
func (c *Containerd) supervise(started chan<- error) {
	// Pdeathsig fires when the forking thread ends: this goroutine keeps
	// it for as long as it runs containerd.
	runtime.LockOSThread()
	defer close(c.loopDone)
	defer func() { _ = c.log.Close() }()
	logger := c.logger
	backoff := minBackoff
	for first := true; ; first = false {
		cmd := c.command()
		c.mu.Lock()
		if c.stopping {
			c.mu.Unlock()
			if first {
				started <- errors.New("containerd: stopped before it started")
			}
			return
		}
		err := cmd.Start()
		if err == nil {
			c.proc = cmd.Process
			c.starts++
		}
		c.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("containerd: start %s: %w", c.binary.Path, err)
			if first {
				started <- err
			} else {
				logger.Error(err, "containerd cannot be started again: the node ends")
				c.End(err)
			}
			return
		}
		if err := os.WriteFile(c.pidPath, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
			logger.Error(err, "Writing containerd's pid file")
		}
		if first {
			started <- nil
		} else {
			logger.Info("Restarted containerd", "pid", cmd.Process.Pid)
		}
		exited := make(chan struct{})
		go c.watchAnswer(cmd.Process.Pid, exited, first)
		began := time.Now()
		err = cmd.Wait()
		close(exited)
		_ = os.Remove(c.pidPath)

		c.mu.Lock()
		c.proc = nil
		stopping := c.stopping
		c.mu.Unlock()
		if stopping {
			logger.Info("containerd stopped", "status", exitStatus(cmd, err))
			return
		}
		ran := time.Since(began)
		if ran > stableAfter {
			backoff = minBackoff
		}
		logger.Error(nil, "containerd died; restarting it (running containers keep running)", "pid", cmd.Process.Pid,
			"status", exitStatus(cmd, err), "ran", ran.Round(time.Millisecond), "restartIn", backoff, "lastOutput", c.log.Tail())
		select {
		case <-c.stopCh:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// exitStatus says how containerd ended: "exit status 1", "signal: killed".
func exitStatus(cmd *exec.Cmd, err error) string {
	if cmd.ProcessState != nil {
		return cmd.ProcessState.String()
	}
	return err.Error()
}

// watchAnswer waits until the containerd of pid answers CRI Version and
// marks the component ready, or logs that it answers again after a
// restart; it gives up when that containerd exits.
func (c *Containerd) watchAnswer(pid int, exited <-chan struct{}, first bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-c.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	begin := time.Now()
	v, err := waitCRI(ctx, c.socket)
	if err != nil {
		return
	}
	c.logger.Info("containerd answers", "pid", pid, "runtime", v.GetRuntimeName()+" "+v.GetRuntimeVersion(), "after", time.Since(begin).Round(time.Millisecond))
	c.MarkReady()
}

// waitCRI polls CRI Version on socket until it answers or ctx ends.
func waitCRI(ctx context.Context, socket string) (*runtimeapi.VersionResponse, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := client.Version(callCtx, &runtimeapi.VersionRequest{Version: "v1"})
		cancel()
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last answer: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// Ready waits until containerd answers CRI Version on its socket, at most
// ReadyTimeout.
func (c *Containerd) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		c.mu.Lock()
		log := c.log
		c.mu.Unlock()
		tail := ""
		if log != nil {
			tail = log.Tail()
		}
		return fmt.Errorf("containerd does not answer on %s: %w; its last output (all in %s):\n%s",
			c.socket, err, filepath.Join(c.cfg.Dir, LogFile), tail)
	}
	return nil
}

// Stop stops containerd: SIGTERM, then SIGKILL after StopTimeout (or when
// ctx ends). Its containers keep running.
func (c *Containerd) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.stopping {
		c.stopping = true
		close(c.stopCh)
	}
	proc, done := c.proc, c.loopDone
	c.mu.Unlock()
	if done == nil {
		return nil
	}
	if proc != nil {
		_ = proc.Signal(syscall.SIGTERM)
	}
	timer := time.NewTimer(c.cfg.StopTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
	case <-ctx.Done():
	}
	c.mu.Lock()
	proc = c.proc
	c.mu.Unlock()
	if proc != nil {
		c.logger.Info("containerd did not stop after SIGTERM; killing it", "pid", proc.Pid, "waited", c.cfg.StopTimeout)
		_ = proc.Kill()
	}
	<-done
	return nil
}

// stopLeftover stops a containerd of an earlier run over this directory
// (its pid file names it, and its command line names this config), which
// would hold the root's lock.
func (c *Containerd) stopLeftover(ctx context.Context, logger logr.Logger) error {
	b, err := os.ReadFile(c.pidPath)
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || !runsConfig(pid, c.configPath) {
		_ = os.Remove(c.pidPath)
		return nil
	}
	logger.Info("A containerd of an earlier run is still there: stopping it before starting this one (its containers keep running)", "pid", pid)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(c.cfg.StopTimeout)
	for runsConfig(pid, c.configPath) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(c.cfg.StopTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd: waiting for the containerd of an earlier run (pid %d) to stop: %w", pid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	_ = os.Remove(c.pidPath)
	return nil
}

// runsConfig: process pid is alive (not a zombie) and runs with --config
// config.
func runsConfig(pid int, config string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return strings.Contains(string(cmdline), "\x00--config\x00"+config+"\x00")
}
