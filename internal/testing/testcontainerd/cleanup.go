package testcontainerd

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Stop removes every pod sandbox still there (which tears its network
// down), stops containerd (SIGTERM, SIGKILL after 20 s), kills the shims
// it left and their containers, and unmounts what is left under Root and
// State. It reports what went wrong through logf.
func (c *Containerd) Stop(logf func(format string, args ...any)) {
	select {
	case <-c.exited:
	default:
		c.removePods(logf)
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(20 * time.Second):
			logf("testcontainerd: containerd still runs 20 s after SIGTERM; killing it")
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	c.killShims(logf)
	c.unmountAll(logf)
}

// removePods stops and removes every pod sandbox through CRI.
func (c *Containerd) removePods(logf func(format string, args ...any)) {
	conn, err := grpc.NewClient(c.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		logf("testcontainerd: CRI client: %v", err)
		return
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pods, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		logf("testcontainerd: list pod sandboxes: %v", err)
		return
	}
	for _, p := range pods.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			logf("testcontainerd: stop pod sandbox %s: %v", p.Id, err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			logf("testcontainerd: remove pod sandbox %s: %v", p.Id, err)
		}
	}
}

// killShims kills the shims started for this containerd (their command
// line names its socket) and everything below them.
func (c *Containerd) killShims(logf func(format string, args ...any)) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if !strings.Contains(args[0], "containerd-shim") || !containsArg(args, c.Socket) {
			continue
		}
		for _, p := range append(descendants(pid), pid) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		logf("testcontainerd: killed leftover shim %d and its processes", pid)
	}
}

func containsArg(args []string, s string) bool {
	for _, a := range args {
		if a == s || strings.HasSuffix(a, "="+s) || a == "unix://"+s {
			return true
		}
	}
	return false
}

// descendants lists pid's children, grandchildren...
func descendants(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", task.Name(), "children"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			child, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			out = append(out, descendants(child)...)
			out = append(out, child)
		}
	}
	return out
}

// unmountAll detaches every mount under Root or State, deepest first.
func (c *Containerd) unmountAll(logf func(format string, args ...any)) {
	UnmountUnder(logf, c.Root, c.State)
}

// UnmountUnder detaches every mount at or below dirs, deepest first (a
// kubelet bind-mounts its root dir and pods' volumes below it).
func UnmountUnder(logf func(format string, args ...any), dirs ...string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var mounts []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for _, dir := range dirs {
			if mp == dir || strings.HasPrefix(mp, dir+"/") {
				mounts = append(mounts, mp)
			}
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, mp := range mounts {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			logf("testcontainerd: unmount %s: %v", mp, err)
		}
	}
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Teardown cleans up after a containerd that a test did not start with
// Launch (a managed containerd component, say) over socket, root and
// state: it removes every pod sandbox through CRI while containerd still
// answers, calls stop (which stops containerd), then kills the shims left
// for that socket and their containers, and unmounts what is left under
// root and state.
func Teardown(socket, root, state string, stop func(), logf func(format string, args ...any)) {
	c := &Containerd{Socket: socket, Endpoint: "unix://" + socket, Root: root, State: state}
	c.removePods(logf)
	stop()
	c.killShims(logf)
	c.unmountAll(logf)
}
