package containerd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"github.com/edgeplane/edgeplane/pkg/airgap"
	"github.com/edgeplane/edgeplane/pkg/containerd"
)

// testTemplate is the generated configuration with one change these test
// machines need: they refuse a negative oom_score_adj, which the CRI
// plugin gives every sandbox (-998) unless restricted to containerd's own.
// It goes through config.toml.tmpl, the user template.
func testTemplate(t *testing.T) string {
	t.Helper()
	base := containerd.BaseTemplate()
	const anchor = "  enable_selinux = false\n"
	if !strings.Contains(base, anchor) {
		t.Fatalf("the base template lacks %q", anchor)
	}
	return strings.Replace(base, anchor, anchor+"  restrict_oom_score_adj = true\n", 1)
}

func requireContainerd(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Require(t, "root (containerd needs it)", errors.New("not root"))
	}
	_, err := os.Stat(testcontainerd.Binary)
	testenv.Require(t, "containerd (apt-get install containerd runc)", err)
	_, err = exec.LookPath("runc")
	testenv.Require(t, "runc (apt-get install runc)", err)
}

func newComponent(t *testing.T, dir, cniConf string) *containerd.Containerd {
	t.Helper()
	c, err := containerd.New(context.Background(), containerd.Config{
		Dir:          dir,
		CgroupDriver: "cgroupfs",
		SandboxImage: testimage.DefaultPauseName,
		CNIBinDir:    "/usr/lib/cni",
		CNIConfDir:   cniConf,
		ReadyTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestManagedContainerd runs Debian's containerd as the component: the
// generated configuration (through a user template), CRI answers, a pod
// sandbox on the host network and a busybox container run; a SIGKILL of
// containerd is logged and it is restarted while the container goes on
// running; a Stop and a new component over the same directory find the
// container still running.
func TestManagedContainerd(t *testing.T) {
	requireContainerd(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	dir := filepath.Join(t.TempDir(), "containerd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, containerd.TemplateFile), []byte(testTemplate(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	cniConf := t.TempDir()
	current := newComponent(t, dir, cniConf)
	t.Cleanup(func() {
		testcontainerd.Teardown(current.Socket(), filepath.Join(dir, containerd.RootDir), filepath.Join(dir, containerd.StateDir),
			func() { _ = current.Stop(context.Background()) }, t.Logf)
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, containerd.LogFile))
			t.Logf("containerd.log:\n%s", b)
		}
	})
	if err := current.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := current.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}

	// The generated files.
	for p, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, containerd.ConfigFile): 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", p, fi.Mode().Perm(), err, want)
		}
	}
	config, _ := os.ReadFile(filepath.Join(dir, containerd.ConfigFile))
	if !strings.Contains(string(config), "restrict_oom_score_adj = true") {
		t.Errorf("config.toml was not rendered from config.toml.tmpl:\n%s", config)
	}

	importImages(ctx, t, current.Socket())
	rt := criClient(ctx, t, current.Endpoint())
	v, err := rt.Version(ctx, "v1")
	if err != nil || v.RuntimeName != "containerd" {
		t.Fatalf("CRI Version = %v, %v; want containerd", v, err)
	}

	podID, cid := runSleeper(ctx, t, rt)
	pid := runningPID(ctx, t, rt, cid)

	// containerd dies: it is restarted, the container runs on.
	old := current.PID()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		if p := current.PID(); p == 0 || p == old {
			return false, nil
		}
		_, err := rt.Version(ctx, "v1")
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("containerd (pid %d) was not restarted after SIGKILL: %v (starts %d)", old, err, current.Starts())
	}
	if got := runningPID(ctx, t, rt, cid); got != pid {
		t.Errorf("container pid %d after the restart, want %d (the same process)", got, pid)
	}
	if !alive(pid) {
		t.Errorf("container process %d is gone after containerd's restart", pid)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if !strings.Contains(logs, "containerd died") || !strings.Contains(logs, "signal: killed") {
		t.Errorf("the death is not logged with its status (want \"containerd died\" and \"signal: killed\"):\n%s", logs)
	}

	// Stop, and a new component over the same directory: the container
	// is still there and running.
	if err := current.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !alive(pid) {
		t.Fatalf("container process %d died with containerd's Stop", pid)
	}
	current = newComponent(t, dir, cniConf)
	if err := current.Start(ctx); err != nil {
		t.Fatalf("Start again: %v", err)
	}
	if err := current.Ready(ctx); err != nil {
		t.Fatalf("Ready again: %v", err)
	}
	if got := runningPID(ctx, t, rt, cid); got != pid {
		t.Errorf("container pid %d after a new component, want %d", got, pid)
	}
	pod, err := rt.PodSandboxStatus(ctx, podID, false)
	if err != nil || pod.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod sandbox after a new component: %v, %v; want SANDBOX_READY", pod.GetStatus().GetState(), err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, containerd.LogFile)); err != nil || !strings.Contains(string(b), "containerd successfully booted") {
		t.Errorf("containerd.log (%v) lacks containerd's own start lines", err)
	}
}

func importImages(ctx context.Context, t *testing.T, socket string) {
	t.Helper()
	dir := t.TempDir()
	for _, img := range []testimage.Image{testimage.Busybox(), testimage.Pause()} {
		if _, err := testimage.Write(dir, img); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := airgap.Import(ctx, airgap.Options{Address: socket, Dir: dir, Pinned: []string{testimage.DefaultPauseName}}); err != nil {
		t.Fatalf("import the test images: %v", err)
	}
}

func criClient(ctx context.Context, t *testing.T, endpoint string) internalapi.RuntimeService {
	t.Helper()
	rt, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(10 * time.Second).WithUseStreaming(false).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	return rt
}

// runningPID waits until the container is RUNNING and returns its
// process id, from CRI's verbose status.
func runningPID(ctx context.Context, t *testing.T, rt internalapi.RuntimeService, id string) int {
	t.Helper()
	var pid int
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := rt.ContainerStatus(ctx, id, true)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = resp.GetStatus().GetState().String()
		if resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return false, nil
		}
		var info struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid == 0 {
			return false, fmt.Errorf("no pid in the verbose status %q: %v", resp.GetInfo()["info"], err)
		}
		pid = info.Pid
		return true, nil
	})
	if err != nil {
		t.Fatalf("container %s not running: %v (last: %s)", id, err, last)
	}
	return pid
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// helperEnv makes the test binary a stand-in for edgeplane (TestMain,
// helperEdgeplane): it runs the component over the directory named and
// waits to be killed.
const helperEnv = "EDGEPLANE_CONTAINERD_TEST_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		helperEdgeplane(dir)
	}
	os.Exit(m.Run())
}

// helperEdgeplane, run by TestEdgeplaneKilled as a child process, starts
// the component, prints containerd's pid and blocks.
func helperEdgeplane(dir string) {
	ctx := context.Background()
	c, err := containerd.New(ctx, containerd.Config{
		Dir:          dir,
		CgroupDriver: "cgroupfs",
		SandboxImage: testimage.DefaultPauseName,
		CNIBinDir:    "/usr/lib/cni",
		CNIConfDir:   filepath.Join(dir, "cni"),
		ReadyTimeout: 30 * time.Second,
	})
	if err == nil {
		err = c.Start(ctx)
	}
	if err == nil {
		err = c.Ready(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("containerd-pid %d\n", c.PID())
	select {}
}

// TestEdgeplaneKilled: a SIGKILL of the process that runs the component
// (a stand-in for edgeplane) stops its containerd (Pdeathsig) and leaves
// the container running; a new component over the same directory finds
// it. A containerd left running over the directory (its pid file names it)
// is stopped by the next Start, which then runs its own.
func TestEdgeplaneKilled(t *testing.T) {
	requireContainerd(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	dir := filepath.Join(t.TempDir(), "containerd")
	if err := os.MkdirAll(filepath.Join(dir, "cni"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, containerd.TemplateFile), []byte(testTemplate(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, containerd.SocketFile)
	var current *containerd.Containerd
	var strays []*exec.Cmd
	var ctdPID int // the helper's containerd, should it outlive the helper
	t.Cleanup(func() {
		testcontainerd.Teardown(socket, filepath.Join(dir, containerd.RootDir), filepath.Join(dir, containerd.StateDir), func() {
			if current != nil {
				_ = current.Stop(context.Background())
			}
			for _, cmd := range strays {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			if ctdPID != 0 && alive(ctdPID) {
				_ = syscall.Kill(ctdPID, syscall.SIGKILL)
			}
		}, t.Logf)
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, containerd.LogFile))
			t.Logf("containerd.log:\n%s", b)
		}
	})

	helper := exec.Command(os.Args[0])
	helper.Env = append(os.Environ(), helperEnv+"="+dir)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	strays = append(strays, helper)
	ctdPID = readPID(t, out)

	importImages(ctx, t, socket)
	rt := criClient(ctx, t, "unix://"+socket)
	_, cid := runSleeper(ctx, t, rt)
	pid := runningPID(ctx, t, rt, cid)

	// edgeplane is killed: its containerd stops, the container runs on.
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return !alive(ctdPID), nil
	})
	if err != nil {
		t.Fatalf("containerd (pid %d) still runs after its edgeplane was killed: %v", ctdPID, err)
	}
	if !alive(pid) {
		t.Fatalf("container process %d died with edgeplane", pid)
	}
	current = newComponent(t, dir, filepath.Join(dir, "cni"))
	if err := current.Start(ctx); err != nil {
		t.Fatalf("Start after the kill: %v", err)
	}
	if err := current.Ready(ctx); err != nil {
		t.Fatalf("Ready after the kill: %v", err)
	}
	if got := runningPID(ctx, t, rt, cid); got != pid {
		t.Errorf("container pid %d after edgeplane's restart, want %d", got, pid)
	}
	if err := current.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// A containerd of an earlier run still holds the directory.
	stray := exec.Command(testcontainerd.Binary, "--config", filepath.Join(dir, containerd.ConfigFile))
	stray.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	strays = append(strays, stray)
	strayExited := make(chan struct{})
	go func() { _ = stray.Wait(); close(strayExited) }()
	if err := os.WriteFile(filepath.Join(dir, containerd.PIDFile), []byte(fmt.Sprint(stray.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Version(ctx, "v1"); err != nil {
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := rt.Version(ctx, "v1")
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("the stray containerd does not answer: %v", err)
		}
	}
	current = newComponent(t, dir, filepath.Join(dir, "cni"))
	if err := current.Start(ctx); err != nil {
		t.Fatalf("Start over a stray containerd: %v", err)
	}
	if err := current.Ready(ctx); err != nil {
		t.Fatalf("Ready over a stray containerd: %v", err)
	}
	select {
	case <-strayExited:
	default:
		t.Errorf("the stray containerd (pid %d) still runs next to the component's (pid %d)", stray.Process.Pid, current.PID())
	}
	if got := runningPID(ctx, t, rt, cid); got != pid {
		t.Errorf("container pid %d after the stray's replacement, want %d", got, pid)
	}
}

func readPID(t *testing.T, out io.Reader) int {
	t.Helper()
	lines := make(chan int, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			var pid int
			if _, err := fmt.Sscanf(s.Text(), "containerd-pid %d", &pid); err == nil {
				lines <- pid
			}
		}
		close(lines)
	}()
	select {
	case pid, ok := <-lines:
		if !ok {
			t.Fatal("the helper process ended without starting containerd")
		}
		return pid
	case <-time.After(60 * time.Second):
		t.Fatal("the helper process did not start containerd within 60 s")
	}
	return 0
}

// runSleeper runs a pod sandbox on the host network and a busybox
// container that sleeps in it; it returns their ids.
func runSleeper(ctx context.Context, t *testing.T, rt internalapi.RuntimeService) (podID, cid string) {
	t.Helper()
	sandbox := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "survivor", Namespace: "default", Uid: "uid-survivor"},
		LogDirectory: t.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD},
		}},
	}
	podID, err := rt.RunPodSandbox(ctx, sandbox, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	cid, err = rt.CreateContainer(ctx, podID, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "sleeper"},
		Image:    &runtimeapi.ImageSpec{Image: testimage.DefaultBusyboxName},
		Command:  []string{"/bin/sh", "-c", `trap "exit 0" TERM; sleep 3600 & wait`},
		LogPath:  "sleeper.log",
	}, sandbox)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if err := rt.StartContainer(ctx, cid); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return podID, cid
}
