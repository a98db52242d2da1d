package e2e

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// binary is the edgeplane binary built once by TestMain with a plain `go build`.
var binary string

// runDir holds what the run builds once for all tests (the binary, the
// CoreDNS and in-cluster client builds); TestMain removes it at the end.
var runDir string

func TestMain(m *testing.M) {
	flag.Parse()
	setUpParallel()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "edgeplane-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	runDir = dir
	binary = filepath.Join(dir, "edgeplane")
	// A plain `go build`, as a user without make builds it: no -ldflags
	// stamps, so every test also checks that such a binary reports the
	// Kubernetes version by itself (internal/kubeversion; TestUnstampedVersion).
	build := exec.Command("go", "build", "-o", binary, "../../cmd/edgeplane")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build edgeplane:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer collects a process's output for assertions and failure logs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// server is one edgeplane process.
type server struct {
	t          *testing.T
	dataDir    string
	cmd        *exec.Cmd
	output     *syncBuffer
	ready      chan struct{}
	exited     chan struct{}
	exitErr    error
	kubeconfig string
	config     *rest.Config
	client     *kubernetes.Clientset
	// stopAsked: the test stopped or killed it (stop, kill).
	stopAsked atomic.Bool
}

// mustKeepRunning fails t, when it ends, if the server exited without the
// test asking it to: a server whose node ended (a part of its node failed)
// exits, and a test that does not look would pass on a dead server.
func (s *server) mustKeepRunning(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		select {
		case <-s.exited:
			if !s.stopAsked.Load() {
				t.Errorf("edgeplane exited during the test without being asked to (%v):\n%s", s.exitErr, tail(s.output.String()))
			}
		default:
		}
	})
}

var readyLine = regexp.MustCompile(`edgeplane ready in ([0-9.]+) s, kubeconfig at ([^"\s]+)`)

// command prepares edgeplane with args on dataDir, bound to loopback on a free port.
// Such a server publishes no endpoint for the kubernetes Service (pods could
// not connect to loopback): a test that needs one passes --bind-address
// 0.0.0.0, or an --advertise-address standing for an address in front of it.
// Unless the test names a container runtime, the server is a control plane
// only: a host that runs containerd would otherwise make every test server a
// node, all of them on the kubelet's one port; a test that names one also
// passes --bind-address 0.0.0.0 (nodeServerWith), as a server bound to
// loopback refuses to be a node.
func command(dataDir string, args ...string) *exec.Cmd {
	base := []string{"server", "--data-dir", dataDir, "--bind-address", "127.0.0.1", "--https-port", "0"}
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--container-runtime-endpoint") }) {
		base = append(base, "--disable=kubelet")
	}
	// These servers run in the host's network namespace, shared with other
	// tests: their nodes (and agents joining them) run no flannel and no
	// kube-proxy unless the test asks (the two-node cluster harness runs
	// both in namespaces of its own: cluster_test.go).
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--flannel-backend") }) {
		base = append(base, "--flannel-backend=none")
	}
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--kube-proxy-mode") }) {
		base = append(base, "--disable=kube-proxy")
	}
	return exec.Command(binary, append(base, args...)...)
}

// startServer starts edgeplane and waits until it logs that it is ready.
func startServer(t *testing.T, dataDir string, args ...string) *server {
	t.Helper()
	return waitReady(t, launch(t, dataDir, args...))
}

// waitReady waits until s logs that it is ready and loads its kubeconfig.
func waitReady(t *testing.T, s *server) *server {
	t.Helper()
	select {
	case <-s.ready:
	case <-s.exited:
		t.Fatalf("edgeplane exited before ready (%v):\n%s", s.exitErr, tail(s.output.String()))
	case <-time.After(3 * time.Minute):
		t.Fatalf("edgeplane not ready after 3 minutes:\n%s", tail(s.output.String()))
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatalf("load %s: %v", s.kubeconfig, err)
	}
	s.config = cfg
	s.client = kubernetes.NewForConfigOrDie(cfg)
	return s
}

// withEnv adds env (KEY=value) to cmd's environment, which is otherwise the
// test process's: what t.Setenv would pass on to the process, without
// making the test serial.
func withEnv(cmd *exec.Cmd, env ...string) *exec.Cmd {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// launch starts edgeplane without waiting; Stop is registered as cleanup.
func launch(t *testing.T, dataDir string, args ...string) *server {
	t.Helper()
	return launchCmd(t, dataDir, command(dataDir, args...))
}

// launchCmd starts cmd, an edgeplane server on dataDir (command's, possibly
// wrapped), without waiting; Stop is registered as cleanup.
func launchCmd(t *testing.T, dataDir string, cmd *exec.Cmd) *server {
	t.Helper()
	s := &server{t: t, dataDir: dataDir, output: &syncBuffer{}, ready: make(chan struct{}), exited: make(chan struct{})}
	s.cmd = cmd
	pr, pw := io.Pipe()
	s.cmd.Stdout = s.output
	s.cmd.Stderr = io.MultiWriter(s.output, pw)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		signalled := false
		for sc.Scan() {
			if m := readyLine.FindStringSubmatch(sc.Text()); m != nil && !signalled {
				s.kubeconfig = m[2]
				signalled = true
				close(s.ready)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		s.exitErr = s.cmd.Wait()
		_ = pw.Close()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("edgeplane output (%s):\n%s", dataDir, tail(s.output.String()))
		}
	})
	return s
}

// stop sends SIGTERM and expects a clean exit within a minute.
func (s *server) stop() {
	s.t.Helper()
	s.stopAsked.Store(true)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		s.kill()
		s.t.Fatalf("edgeplane did not stop within a minute of SIGTERM:\n%s", tail(s.output.String()))
	}
	if s.exitErr != nil {
		s.t.Fatalf("edgeplane exited with %v after SIGTERM:\n%s", s.exitErr, tail(s.output.String()))
	}
}

func (s *server) kill() {
	s.stopAsked.Store(true)
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// runToExit runs edgeplane expecting it to fail; it returns the combined output.
func runToExit(t *testing.T, dataDir string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := command(dataDir, args...)
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run edgeplane: %v", err)
	}
	return string(out), code
}

// tail keeps the end of a long log.
func tail(s string) string {
	const max = 8000
	if len(s) > max {
		return "...\n" + s[len(s)-max:]
	}
	return s
}

// kubectl runs the kubectl on the PATH against s.
func (s *server) kubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// eventually polls cond every 100ms until it returns true or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	var lastErr error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			lastErr = err
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, lastErr)
	}
}

// datastoreCases are the datastores the tests that run on each of them use.
var datastoreCases = []string{"sqlite", "etcd"}

// cli runs `edgeplane args...` and checks its exit code.
func cli(t *testing.T, wantCode int, args ...string) string {
	t.Helper()
	return cliEnv(t, nil, wantCode, args...)
}

// cliEnv is cli with env added to the command's environment (withEnv).
func cliEnv(t *testing.T, env []string, wantCode int, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := withEnv(exec.CommandContext(ctx, binary, args...), env...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("edgeplane %v: %v", args, err)
	}
	if code != wantCode {
		t.Fatalf("edgeplane %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, wantCode, out)
	}
	return string(out)
}

// wantText fails unless out contains want.
func wantText(t *testing.T, out, want string) {
	t.Helper()
	if !strings.Contains(out, want) {
		t.Fatalf("output does not say %q:\n%s", want, tail(out))
	}
}
