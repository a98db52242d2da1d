package pauseimage

import (
	"bufio"
	"bytes"
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
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/pkg/pauseimage/internal/build"
)

// TestCommittedTarballs rebuilds every architecture's tarball from the
// pause program's source and compares it with the committed one: a change
// to the program, the image name or the image layout without `go generate
// ./pkg/pauseimage` fails here. The bytes depend on the Go toolchain (its
// version string is in the program), so with another go than the one the
// tarballs were made with (GoVersion) the comparison cannot hold: the test
// then skips, naming both versions.
func TestCommittedTarballs(t *testing.T) {
	goVersion, err := build.GoVersion()
	testenv.Require(t, "the go command", err)
	if goVersion != GoVersion {
		t.Logf("the committed pause images were built with %s, this go is %s: their bytes differ by the toolchain alone (run go generate ./pkg/pauseimage to rebuild them with this one)", GoVersion, goVersion)
		testenv.SkipByDesign(t, "pause-toolchain")
	}
	for _, arch := range build.Arches {
		t.Run(arch, func(t *testing.T) {
			committed, err := os.ReadFile(build.FileName(arch))
			if err != nil {
				t.Fatalf("%v: run go generate ./pkg/pauseimage", err)
			}
			rebuilt, err := build.Tarball(build.SourceDir, Name, arch)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(committed, rebuilt) {
				t.Errorf("%s (%d bytes) differs from the image built from %s (%d bytes): run go generate ./pkg/pauseimage and commit the result",
					build.FileName(arch), len(committed), build.SourceDir, len(rebuilt))
			}
		})
	}
	// This build's embedded tarball is the committed one of its arch.
	if Available() {
		committed, err := os.ReadFile(build.FileName(runtime.GOARCH))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(Tarball(), committed) {
			t.Errorf("the embedded tarball is not %s", build.FileName(runtime.GOARCH))
		}
	}
}

// pauseProgram builds the pause program from source for this machine.
func pauseProgram(t *testing.T) string {
	t.Helper()
	b, err := build.Program(build.SourceDir, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPauseSignals: SIGTERM and SIGINT end the pause program with exit
// status 0 (a pod's sandbox stops cleanly); -v prints its version.
func TestPauseSignals(t *testing.T) {
	pause := pauseProgram(t)
	out, err := exec.Command(pause, "-v").Output()
	if err != nil || !strings.HasPrefix(string(out), "edgeplane-pause ") {
		t.Errorf("pause -v: %q, %v", out, err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(pause)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			// The warning (not PID 1) comes once its signals are handled.
			lines := bufio.NewScanner(stderr)
			if !lines.Scan() || !strings.Contains(lines.Text(), "should be the first process") {
				t.Fatalf("pause's first line: %q", lines.Text())
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			var rest bytes.Buffer
			for lines.Scan() {
				rest.WriteString(lines.Text() + "\n")
			}
			err = cmd.Wait()
			st := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if err != nil || !st.Exited() || st.ExitStatus() != 0 {
				t.Fatalf("pause after %v: %v (%s), want exit status 0; stderr: %s", sig, err, cmd.ProcessState, rest.String())
			}
		})
	}
}

// TestPauseReapsZombies runs pause as PID 1 of a PID namespace of its own,
// as in a pod, and leaves it an orphan there (a shell started in that
// namespace that backgrounds a short sleep and exits): the orphan is
// reparented to pause, and when it ends pause reaps it, so it does not stay
// a zombie. Then SIGTERM ends pause with status 0.
func TestPauseReapsZombies(t *testing.T) {
	testenv.Require(t, "root (a PID namespace)", rootErr())
	nsenter := testenv.Tool(t, "apt-get install util-linux", "nsenter")
	testenv.Require(t, "busybox (apt-get install busybox-static)", statErr("/bin/busybox"))
	pause := pauseProgram(t)

	cmd := exec.Command(pause)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	pid := cmd.Process.Pid

	// The shell is nsenter's child; its background sleep, orphaned when
	// the shell exits, goes to the namespace's init: pause.
	sh := exec.Command(nsenter, "--target", strconv.Itoa(pid), "--pid", "--", "/bin/busybox", "sh", "-c", "/bin/busybox sleep 1 </dev/null >/dev/null 2>&1 & exit 0")
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	var child int
	for p, state := range childrenOf(pid) {
		t.Logf("pause (%d) has the child %d (state %s)", pid, p, state)
		child = p
	}
	if child == 0 {
		t.Fatalf("the orphaned sleep is not pause's child; pause's stderr: %s", stderr.String())
	}
	var state string
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var ok bool
		state, ok = childrenOf(pid)[child]
		return !ok, nil
	})
	if err != nil {
		t.Fatalf("pause's child %d ended but is still there (state %s: Z is a zombie pause did not reap) after 10s", child, state)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("pause as PID 1 did not end within 10s of SIGTERM")
	}
	st := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !st.Exited() || st.ExitStatus() != 0 {
		t.Fatalf("pause as PID 1 after SIGTERM: %s, want exit status 0; stderr: %s", cmd.ProcessState, stderr.String())
	}
}

func rootErr() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	return nil
}

func statErr(path string) error { _, err := os.Stat(path); return err }

// childrenOf lists the PIDs whose parent is pid, and their state letters.
func childrenOf(pid int) map[int]string {
	kids := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
			kids[p] = f[0]
		}
	}
	return kids
}

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
