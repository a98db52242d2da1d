package e2e

import (
	"bufio"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// qemuReadyTimeout bounds a server start under emulation (about 10x slower
// than native).
const qemuReadyTimeout = 8 * time.Minute

// TestQEMUArm64 proves the linux/arm64 binary runs: under qemu-aarch64 it
// prints its version and a server reaches /readyz. It cross-builds arm64
// (slow: minutes on a cold cache), so it runs only with EDGEPLANE_TEST_QEMU=1
// (make test-qemu); EDGEPLANE_QEMU_BINARY names a prebuilt binary instead.
func TestQEMUArm64(t *testing.T) {
	if os.Getenv("EDGEPLANE_TEST_QEMU") == "" {
		testenv.SkipByDesign(t, "qemu")
	}
	qemu := testenv.Tool(t, "apt-get install -y qemu-user-static", "qemu-aarch64-static", "qemu-aarch64")

	bin := os.Getenv("EDGEPLANE_QEMU_BINARY")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "edgeplane-linux-arm64")
		ldflags, err := exec.Command("../../hack/ldflags.sh", "e2e").Output()
		if err != nil {
			t.Fatalf("hack/ldflags.sh: %v", err)
		}
		begin := time.Now()
		build := exec.Command("go", "build", "-trimpath", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", bin, "../../cmd/edgeplane")
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("cross-build linux/arm64: %v\n%s", err, out)
		}
		t.Logf("cross-built linux/arm64 in %s", time.Since(begin).Round(time.Second))
	}
	checkStaticArm64(t, bin)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, qemu, bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-aarch64 edgeplane version: %v\n%s", err, out)
	}
	for _, want := range []string{"edgeplane ", "commit ", "kubernetes v1.", "linux/arm64"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("version output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("under qemu:\n%s", out)

	runServerUnderQEMU(t, qemu, bin)
}

// checkStaticArm64 reads the ELF header: an aarch64 executable with no
// program interpreter (static).
func checkStaticArm64(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 {
		t.Fatalf("%s is for %v, not aarch64", bin, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked", bin)
		}
	}
}

func runServerUnderQEMU(t *testing.T, qemu, bin string) {
	dataDir := filepath.Join(t.TempDir(), "data")
	// A control plane: the host's containerd binary would otherwise make
	// the server a node with a containerd of its own, which a server
	// bound to loopback refuses to be.
	cmd := exec.Command(qemu, bin, "server", "--config", "", "--data-dir", dataDir, "--bind-address", "127.0.0.1", "--https-port", "0", "--disable=kubelet")
	output := &syncBuffer{}
	pr, pw := io.Pipe()
	cmd.Stdout = output
	cmd.Stderr = io.MultiWriter(output, pw)
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		_ = pw.Close()
		exited <- err
	}()
	defer func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("edgeplane under qemu:\n%s", tail(output.String()))
		}
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if m := readyLine.FindStringSubmatch(sc.Text()); m != nil {
				ready <- m[2]
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()

	var kubeconfig string
	select {
	case kubeconfig = <-ready:
	case err := <-exited:
		t.Fatalf("edgeplane exited under qemu before ready: %v", err)
	case <-time.After(qemuReadyTimeout):
		t.Fatalf("edgeplane under qemu not ready within %s", qemuReadyTimeout)
	}
	t.Logf("ready under qemu-aarch64 in %s", time.Since(begin).Round(100*time.Millisecond))

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = time.Minute
	var status int
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body, _ := kubernetes.NewForConfigOrDie(cfg).Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status).Raw()
	if status != 200 {
		t.Fatalf("/readyz under qemu = %d: %s", status, body)
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("edgeplane under qemu exited with %v after SIGTERM", err)
		}
	case <-time.After(3 * time.Minute):
		t.Errorf("edgeplane under qemu did not stop within 3 minutes of SIGTERM")
	}
}
